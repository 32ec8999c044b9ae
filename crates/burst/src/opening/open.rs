//! A trigger's burst: the prepared files when they fit the window, else files opened now; and
//! when the output cannot hold the whole window, files sized to the room there is.

use std::path::Path;

use snbuf_persist::sink::SourceMemory;
use snbuf_persist::{PersistError, Sink};

use super::ahead::Prepared;
use super::sinks::open_link_sink;
use super::sizing::{disk_room_for_each_link, link_region, max_payload_bytes, Limit, LinkRegion};
use super::{BurstFiles, OpenError};
use crate::link_writer::BurstWriter;
use crate::manifest::{FrameInfo, LinkIdentity, Window};
use crate::spec::{BurstError, BurstSpec};

/// The size a burst's files opened at the trigger start at on memory: they grow from there.
const OPEN_ON_MEMORY_BYTES: u64 = 64 << 20;

/// A burst opened for a trigger.
pub struct OpenedBurst {
    pub burst: BurstWriter<Box<dyn Sink>>,
    /// Whether the medium keeps what a persist made durable through a power cut.
    pub survives_power_loss: bool,
    /// Whether the files were prepared before the trigger.
    pub prepared_ahead: bool,
    /// Each link's room when the output could not hold the whole window (bytes): each link
    /// stops when that is full. None: the window fits.
    pub cut_to_bytes_per_link: Option<u64>,
    /// Bytes of file each link has.
    pub region_bytes: u64,
    /// Bytes of file each link needs for the window (at most what the output has room for):
    /// more than `region_bytes` when the prepared files are smaller than the window; the
    /// writers grow them a step at a time ahead of their writes.
    pub window_region_bytes: u64,
}

/// The burst `burst_id` for `window` on links whose frames are `step` ticks apart, from
/// `prepared` when it fits, else files opened now (`open_new`).
pub fn open_burst(
    files: &BurstFiles,
    burst_id: &str,
    window: &Window,
    identities: Vec<LinkIdentity>,
    prepared: Option<Prepared>,
    sources: &[SourceMemory],
    step: u64,
) -> Result<OpenedBurst, OpenError> {
    assert!(step > 0, "a link's frames are some ticks apart");
    assert!(
        window.window_start_timestamp <= window.window_end_timestamp,
        "{window:?}"
    );
    let window_frames = (window.window_end_timestamp - window.window_start_timestamp) / step + 1;
    let plan = link_region(files, window_frames);
    let spec = burst_spec(files, burst_id, window, identities, step);
    match prepared {
        // The prepared files, whatever the window: the trigger's data starts to go out at once.
        // Files smaller than the window grow as the writers go (`window_region_bytes`), never
        // all at the trigger: on memory (tmpfs) growing zeroes the pages, and growing 100 s of
        // file before the first write would hold the window's oldest frames as they age out
        // of the buffer.
        Some(p) if p.burst.fits(&spec) => {
            // The disk's free space is checked now, for what the files still have to grow by.
            let (mut window_region, mut limit) = (p.region_bytes, plan.limited_by);
            if plan.region_bytes > p.region_bytes {
                let (disk, _) = disk_room_for_each_link(files, plan.stride_bytes);
                window_region = plan.region_bytes.min(p.region_bytes + disk);
                if window_region < plan.region_bytes {
                    limit = Some(Limit::Disk);
                }
            }
            let cut = window_region < plan.wanted_bytes;
            if cut {
                let limit = limit.unwrap_or(Limit::Memory);
                say_window_cut(files.home(), window_region, plan.wanted_bytes, limit);
            }
            assert!(
                window_region >= p.region_bytes,
                "the window's files are never smaller than the prepared ones"
            );
            return Ok(OpenedBurst {
                burst: p.burst.start(spec)?,
                survives_power_loss: p.survives_power_loss,
                prepared_ahead: true,
                cut_to_bytes_per_link: cut.then_some(window_region),
                region_bytes: p.region_bytes,
                window_region_bytes: window_region,
            });
        }
        // Nothing prepared, or prepared for other links or frames: dropped now, before the new
        // files are made, so that its space is free for them.
        other => drop(other),
    }
    let opened = open_new(files, spec, &plan, sources)?;
    assert!(
        opened.region_bytes <= plan.region_bytes,
        "files no larger than planned (the space check's answer is capped at the plan)"
    );
    Ok(opened)
}

/// What the manifest will say of the burst: its frames, window, method, links and identities.
fn burst_spec(
    files: &BurstFiles,
    burst_id: &str,
    window: &Window,
    identities: Vec<LinkIdentity>,
    step: u64,
) -> BurstSpec {
    let ft = files.frame_type;
    BurstSpec {
        burst_id: burst_id.to_string(),
        frame: FrameInfo {
            frame_type: ft.name(),
            frame_bytes: ft.frame_bytes(),
            ticks_per_frame: ft.ticks_per_frame(),
            clock_hz: ft.clock_hz(),
            frame_step_ticks: Some(step),
        },
        trigger: Some(window.clone()),
        method: files.method.name().to_string(),
        links: (0..files.links).collect(),
        max_payload_bytes: max_payload_bytes(files),
        identities,
        run_number: files.run_number,
        unit: files.unit_id.clone(),
        injected_faults: files.faults.iter().map(|f| f.to_string()).collect(),
    }
}

/// The burst's files opened now, sized to `plan`; where the disk turns out to hold less (its
/// free space is shared with other writers), sized to what it holds, the cut said.
fn open_new(
    files: &BurstFiles,
    spec: BurstSpec,
    plan: &LinkRegion,
    sources: &[SourceMemory],
) -> Result<OpenedBurst, OpenError> {
    if let Some(limit) = plan.limited_by {
        if plan.region_bytes == 0 {
            return Err(OpenError::NoSpace {
                dir: files.home().clone(),
            });
        }
        say_window_cut(files.home(), plan.region_bytes, plan.wanted_bytes, limit);
    }
    let stride = plan.stride_bytes;
    // On memory (tmpfs) a file's pages are zeroed as it is allocated: the files start small and
    // the writers grow them ahead of their writes (`window_region_bytes`), so that making them
    // never holds the window's oldest frames at the trigger. A disk allocates extents without
    // writing them: its files take the whole window now, the space theirs from the start.
    let memory_backed = files
        .outputs
        .iter()
        .any(|o| snbuf_persist::medium::probe(o).is_ok_and(|m| m.volatile));
    let initial = |region: u64| match memory_backed {
        true => region.min(OPEN_ON_MEMORY_BYTES.div_ceil(stride) * stride),
        false => region,
    };
    let mut survives = true;
    let mut create = |region: u64| {
        survives = true;
        BurstWriter::create_on(&files.outputs, spec.clone(), |link, path| {
            // Reserve the space, but do not populate page tables now: that costs time in
            // proportion to the window, and the pre-trigger data is ageing.
            let source = sources.get(link as usize).cloned();
            let sink = open_link_sink(files, link, path, region, stride, false, source)?;
            survives &= sink.report().durability.survives_power_loss();
            Ok(sink)
        })
    };
    let mut cut_to_bytes_per_link = plan.limited_by.map(|_| plan.region_bytes);
    let mut region_bytes = plan.region_bytes;
    if memory_backed {
        // Files that start small do not find a shortage as they are made: the space is
        // checked now, for all the window will grow to.
        let (fits, tightest) = disk_room_for_each_link(files, stride);
        if fits == 0 {
            return Err(OpenError::NoSpace {
                dir: files.home().clone(),
            });
        }
        if fits < region_bytes {
            say_window_cut(&tightest, fits, plan.wanted_bytes, Limit::Disk);
            cut_to_bytes_per_link = Some(fits);
            region_bytes = fits;
        }
    }
    let burst = match create(initial(region_bytes)) {
        Err(BurstError::Open {
            cause: PersistError::NoSpace { .. },
            ..
        }) => {
            // No larger than planned: a shortage that passed (another writer freed space) is
            // no reason for larger files.
            let (fits, tightest) = disk_room_for_each_link(files, stride);
            let fits = fits.min(plan.region_bytes);
            if fits == 0 {
                return Err(OpenError::NoSpace {
                    dir: files.home().clone(),
                });
            }
            if fits < plan.region_bytes {
                say_window_cut(&tightest, fits, plan.wanted_bytes, Limit::Disk);
                cut_to_bytes_per_link = Some(fits);
            }
            region_bytes = fits;
            create(initial(fits))?
        }
        other => other?,
    };
    Ok(OpenedBurst {
        burst,
        survives_power_loss: survives,
        prepared_ahead: false,
        cut_to_bytes_per_link,
        region_bytes: initial(region_bytes),
        window_region_bytes: region_bytes,
    })
}

/// Tells the operator, once per burst, that the window does not fit and what happens instead.
fn say_window_cut(dir: &Path, fits: u64, wanted: u64, limit: Limit) {
    let why = match limit {
        Limit::Memory => "is memory (tmpfs): its pages are RAM, and memory has",
        Limit::Disk => "has",
    };
    tracing::warn!(
        "{} {why} room for {} per link of the {} this window needs; each link stops \
         when its share is full and the rest of its window is counted lost",
        dir.display(),
        snbuf_quantity::Bytes(fits),
        snbuf_quantity::Bytes(wanted)
    );
}
