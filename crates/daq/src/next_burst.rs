//! The next burst's files, opened in the background while the unit waits for a trigger.
//!
//! A trigger must start persisting at once: the data before it keeps ageing in the latency
//! buffers. Opening a burst — allocating each link's file for the whole window and, on a mapped
//! medium, mapping and first-touching every page — takes time in proportion to the window
//! (about 1 s per 600 MiB on tmpfs here). So the unit prepares the burst of its configured
//! window ahead (`snbuf_burst::PreparedBurst`), and a trigger only renames the directory. A
//! trigger whose window is larger than prepared, or that arrives when nothing is prepared,
//! opens its files itself, without populating the mapping, as before.

use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use snbuf_burst::chunk::stride_for;
use snbuf_burst::PreparedBurst;
use snbuf_persist::fault::{inject, FaultKind};
use snbuf_persist::{open, PersistError, Sink, SinkConfig};

use crate::recorder::{RecordConfig, RecordError};

/// A prepared burst and what it was sized for.
pub(crate) struct Prepared {
    pub burst: PreparedBurst<Box<dyn Sink>>,
    /// Bytes of file per link.
    pub region_bytes: u64,
    /// Whether the medium keeps what a persist made durable through a power cut.
    pub survives_power_loss: bool,
}

/// Where the unit stands with its next burst.
#[derive(Default)]
pub(crate) enum NextBurst {
    #[default]
    None,
    /// Under way, or done (the thread's result holds the prepared burst).
    Preparing(JoinHandle<Result<Prepared, RecordError>>),
}

impl NextBurst {
    /// Starts preparing a burst for windows of `pre + post` (replacing any preparation).
    pub fn start(&mut self, config: &RecordConfig, pre: Duration, post: Duration) {
        self.take();
        let config = config.clone();
        let frames = ((pre + post).as_secs_f64() * config.frames_per_s_per_link).ceil() as u64 + 1;
        let spawned = std::thread::Builder::new()
            .name("snbuf-prepare".into())
            .spawn(move || prepare(&config, frames));
        // Without a thread the trigger opens its own files, as when nothing was prepared.
        if let Ok(h) = spawned {
            *self = NextBurst::Preparing(h);
        }
    }

    /// The prepared burst, waiting for a preparation under way (it does the work a trigger
    /// would otherwise do itself, and started earlier). `None` if nothing was prepared or the
    /// preparation failed (the trigger then opens its files, and reports any error itself).
    pub fn take(&mut self) -> Option<Prepared> {
        match std::mem::take(self) {
            NextBurst::None => None,
            NextBurst::Preparing(h) => h.join().ok().and_then(|r| r.ok()),
        }
    }

    pub fn is_preparing(&self) -> bool {
        matches!(self, NextBurst::Preparing(h) if !h.is_finished())
    }

    pub fn state(&self) -> &'static str {
        match self {
            NextBurst::None => "none",
            _ if self.is_preparing() => "preparing",
            NextBurst::Preparing(_) => "ready",
        }
    }
}

/// Bytes of file per link for a window of `window_frames`, and the chunk stride: room for the
/// window's chunks plus slack for partial chunks, rounded to 2 MiB (huge-page mappings).
pub(crate) fn link_region_bytes(config: &RecordConfig, window_frames: u64) -> (u64, u64) {
    let payload_bytes = config.chunk_frames as usize * config.frame_type.frame_bytes() as usize;
    let chunks = window_frames.div_ceil(config.chunk_frames as u64) + 4 * config.links as u64 + 16;
    let stride = stride_for(payload_bytes, 4096);
    ((chunks * stride).div_ceil(2 << 20) * (2 << 20), stride)
}

/// Opens one link's sink. `populate`: map and touch every page now (ahead of a trigger), or
/// leave the pages to the first writes (at a trigger, where time is short).
pub(crate) fn open_link_sink(
    config: &RecordConfig,
    link: u32,
    path: &Path,
    region_bytes: u64,
    stride: u64,
    populate: bool,
) -> Result<Box<dyn Sink>, PersistError> {
    let mut c = SinkConfig::new(config.method, path, region_bytes);
    c.max_io_bytes = stride as usize;
    c.page_size = config.page_size;
    c.sync_mode = config.sync_mode;
    c.populate = populate;
    let sink = open(&c)?;
    let faults: Vec<FaultKind> = config
        .faults
        .iter()
        .filter(|f| f.applies_to(link))
        .map(|f| f.kind)
        .collect();
    Ok(if faults.is_empty() {
        sink
    } else {
        Box::new(inject(sink, faults))
    })
}

fn prepare(config: &RecordConfig, window_frames: u64) -> Result<Prepared, RecordError> {
    let (region_bytes, stride) = link_region_bytes(config, window_frames);
    let payload_bytes = config.chunk_frames as usize * config.frame_type.frame_bytes() as usize;
    let links: Vec<u32> = (0..config.links).collect();
    let mut survives_power_loss = true;
    let burst = PreparedBurst::prepare(
        &config.output_dir,
        &links,
        config.frame_type.frame_bytes(),
        payload_bytes,
        |link, path| {
            let sink = open_link_sink(config, link, path, region_bytes, stride, true)?;
            survives_power_loss &= sink.report().durability.survives_power_loss();
            Ok(sink)
        },
    )?;
    Ok(Prepared {
        burst,
        region_bytes,
        survives_power_loss,
    })
}
