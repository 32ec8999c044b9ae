//! snbuf-show: what a burst holds, as pictures. `show` reads a burst's verified chunks once, in
//! time order and in bounded memory (`link_view`), and writes a directory holding an HTML page
//! (`page`), its figures as SVG and PNG (`figures`), and `show.json`, the data behind every
//! figure: per link the frames recorded and lost along the trigger window on the detector's
//! clock (trigger at 0), the gaps, and for frame types with ADC values a channel x time heat map
//! of the baseline-subtracted signal, one channel's waveform, and each channel's baseline,
//! noise and flag (dead, noisy).

#![forbid(unsafe_code)]

mod figures;
pub mod link_view;
mod page;
mod page_dir;

pub use page_dir::{page_dir, PageDirError};

use std::path::{Path, PathBuf};

use serde::Serialize;
use snbuf_burst::{BurstReader, End, LinkIdentity, LinkReader, ReadError};
use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameType;

use link_view::{AdcView, Bin, ChannelStats, Gap, LinkAccumulator, PageWindow};

/// What to show, and where.
#[derive(Clone, Debug)]
pub struct ShowOptions {
    pub out_dir: PathBuf,
    /// Links to show (empty: all the manifest lists).
    pub links: Vec<u32>,
    /// The channel whose waveform is drawn (None: each link's channel of largest excursion).
    pub channel: Option<usize>,
    /// Screen columns of the ADC displays (the decimation: min and max per column).
    pub columns: usize,
    /// Bins of the frames-recorded timeline.
    pub bins: usize,
    /// The burst's export state, as `snbuf ls` says it ("no", "yes: s3://...", ...).
    pub export_state: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    #[error("{0}")]
    Read(#[from] ReadError),
    #[error("{0}: the burst has no trigger window to show")]
    NoWindow(PathBuf),
    #[error("--channel {channel}: a {frame_type} link has channels 0-{last}")]
    NoSuchChannel {
        channel: usize,
        frame_type: String,
        last: usize,
    },
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Plot(#[from] snbuf_report::ReportError),
}

/// One channel's waveform over the window (min and max per column), and at full resolution
/// around its largest excursion.
#[derive(Clone, Debug, Serialize)]
pub struct Waveform {
    pub channel: usize,
    /// "given" (--channel) or "largest excursion".
    pub chosen: &'static str,
    pub baseline: f64,
    pub column_s: Vec<f64>,
    pub low: Vec<f64>,
    pub high: Vec<f64>,
    /// (s from the trigger, ADC minus baseline) of every sample near the excursion.
    pub zoom: Vec<(f64, f64)>,
}

/// A link as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub struct LinkShown {
    pub link: u32,
    pub identity: Option<LinkIdentity>,
    pub frames: u64,
    pub expected_frames: u64,
    /// Frames the recorder counted as lost (the manifest's).
    pub lost_frames_recorded: u64,
    pub timeline: Vec<Bin>,
    pub gaps: Vec<Gap>,
    pub adc: Option<AdcView>,
    pub waveform: Option<Waveform>,
    /// What was not read, and why (a torn or bad tail, a chunk whose checksum failed).
    pub skipped: Vec<String>,
}

/// Everything on the page (`show.json`).
#[derive(Clone, Debug, Serialize)]
pub struct Shown {
    pub burst_id: String,
    pub state: String,
    pub run_number: Option<u32>,
    pub unit: Option<String>,
    pub frame_type: String,
    pub clock_hz: u64,
    pub trigger_timestamp: u64,
    pub window_s: (f64, f64),
    pub verified: String,
    pub exported: String,
    pub links: Vec<LinkShown>,
    /// The reduction's memory per link, bytes: what `show` holds, whatever the burst's size.
    pub memory_bytes_per_link: usize,
    #[serde(skip)]
    pub page: PathBuf,
}

/// Reads the burst at `dir` and writes its page; `progress(done, total)` in bytes read. The
/// links in turn, each read once and reduced, so that only one link's reduction is in memory at
/// a time.
pub fn show(
    dir: &Path,
    opts: &ShowOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Shown, ShowError> {
    let reader = BurstReader::open(dir)?;
    let m = &reader.manifest;
    let trigger = m
        .trigger
        .clone()
        .ok_or_else(|| ShowError::NoWindow(dir.to_path_buf()))?;
    let frame = m.frame.clone().unwrap_or_default();
    // (A manifest whose type's frames are not its frames' size is shown without ADC values.)
    let frame_type: Option<FrameType> = frame.frame_type.parse().ok();
    let shape = frame_type
        .filter(|t| t.frame_bytes() == reader.layout.frame_bytes)
        .and_then(AdcShape::of);
    if let (Some(c), Some(s)) = (opts.channel, shape) {
        if c >= s.channels {
            return Err(ShowError::NoSuchChannel {
                channel: c,
                frame_type: frame.frame_type.clone(),
                last: s.channels - 1,
            });
        }
    }
    let window = window_of(&trigger, reader.layout.clock_hz, opts);
    let links: Vec<u32> = if opts.links.is_empty() {
        reader.links()
    } else {
        opts.links.clone()
    };
    let mut readers = Vec::new();
    for &l in &links {
        readers.push(reader.link(l)?);
    }
    let total: u64 = readers
        .iter()
        .flat_map(|r| r.chunks().iter())
        .filter(|c| c.last_timestamp >= window.start && c.first_timestamp < window.end)
        .map(|c| c.payload_bytes as u64)
        .sum();
    std::fs::create_dir_all(&opts.out_dir).map_err(|cause| ShowError::Io {
        path: opts.out_dir.clone(),
        cause,
    })?;
    let mut done = 0;
    let mut shown_links = Vec::new();
    let mut memory = 0;
    for (r, &link) in readers.iter().zip(&links) {
        let mut acc = LinkAccumulator::new(window, reader.layout, r.frame_step_ticks, shape);
        memory = acc.memory_bytes();
        let skipped = read_link(r, window, &mut acc, &mut |n| {
            done += n;
            progress(done, total);
        })?;
        let record = m.links.iter().find(|x| x.link == link);
        shown_links.push(link_shown(
            r, link, record, window, shape, opts, acc, skipped,
        ));
    }
    assert!(
        done <= total,
        "read {done} of the {total} bytes in the window"
    );
    let verified = match m.verified {
        Some(v) if v.valid => "yes".to_string(),
        Some(v) => format!("NO ({} problems)", v.problems),
        None => "not verified yet (snbuf verify)".to_string(),
    };
    let mut shown = Shown {
        burst_id: m.burst_id.clone(),
        state: format!("{:?}", m.state).to_lowercase(),
        run_number: m.run_number,
        unit: m.unit.clone(),
        frame_type: frame.frame_type.clone(),
        clock_hz: window.clock_hz,
        trigger_timestamp: window.trigger,
        window_s: (
            window.seconds_at(window.start),
            window.seconds_at(window.end),
        ),
        verified,
        exported: opts.export_state.clone(),
        links: shown_links,
        memory_bytes_per_link: memory,
        page: opts.out_dir.join("index.html"),
    };
    let figures = figures::draw(&opts.out_dir, &shown)?;
    let json = serde_json::to_string(&shown).expect("the page's data is JSON");
    let write = |name: &str, text: &str| {
        let path = opts.out_dir.join(name);
        std::fs::write(&path, text).map_err(|cause| ShowError::Io { path, cause })
    };
    write("show.json", &json)?;
    write("index.html", &page::html(&shown, &figures))?;
    shown.page = opts.out_dir.join("index.html");
    Ok(shown)
}

/// The window shown: the trigger's, at least a tick long, at the resolution asked for.
fn window_of(trigger: &snbuf_burst::Window, clock_hz: u64, opts: &ShowOptions) -> PageWindow {
    PageWindow {
        start: trigger.window_start_timestamp,
        end: trigger
            .window_end_timestamp
            .max(trigger.window_start_timestamp + 1),
        trigger: trigger.trigger_timestamp,
        clock_hz,
        columns: opts.columns.max(16),
        bins: opts.bins.max(4),
    }
}

/// One link as shown, from what reading it accumulated.
#[allow(clippy::too_many_arguments)]
fn link_shown(
    r: &LinkReader,
    link: u32,
    record: Option<&snbuf_burst::manifest::LinkRecord>,
    window: PageWindow,
    shape: Option<AdcShape>,
    opts: &ShowOptions,
    acc: LinkAccumulator,
    skipped: Vec<String>,
) -> LinkShown {
    let (timeline, gaps, frames, expected) = acc.timeline();
    let adc = acc.adc();
    let waveform = match (&adc, shape) {
        (Some(a), Some(s)) => Some(waveform(r, window, s, a, &acc, opts.channel)),
        _ => None,
    };
    LinkShown {
        link,
        identity: record.and_then(|x| x.identity),
        frames,
        expected_frames: expected,
        lost_frames_recorded: record.map_or(0, |x| x.lost_frames),
        timeline,
        gaps,
        adc,
        waveform,
        skipped,
    }
}

/// Feeds `acc` the link's frames inside the window from its verified chunks, each chunk's CRC
/// checked again as it is read; returns what it could not read, and why.
fn read_link(
    r: &LinkReader,
    w: PageWindow,
    acc: &mut LinkAccumulator,
    read: &mut dyn FnMut(u64),
) -> Result<Vec<String>, ShowError> {
    let mut skipped = Vec::new();
    let fb = r.layout.frame_bytes as usize;
    let mut payload = Vec::new();
    for c in r.chunks() {
        if c.last_timestamp < w.start || c.first_timestamp >= w.end {
            continue;
        }
        match r.read_chunk(c, &mut payload) {
            Ok(_) => {}
            Err(ReadError::Changed { .. }) => {
                skipped.push(format!(
                    "chunk {} at offset {}: its checksum no longer matches; not read",
                    c.sequence, c.offset
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        for f in payload.chunks_exact(fb) {
            if (w.start..w.end).contains(&r.layout.timestamp(f)) {
                acc.frame(f);
            }
        }
        read(c.payload_bytes as u64);
    }
    match r.end() {
        End::Clean { .. } => {}
        End::TornTail { offset, bytes, why } => skipped.push(format!(
            "{bytes} B from offset {offset}: a torn tail ({why}); not read"
        )),
        End::BadChunk { offset, bytes, why } => skipped.push(format!(
            "{bytes} B from offset {offset} and everything after: a bad chunk ({why}); not read (snbuf verify says more)"
        )),
        End::FutureVersion { offset, version } => skipped.push(format!(
            "from offset {offset}: chunk format version {version}, newer than this snbuf; not read"
        )),
    }
    Ok(skipped)
}

/// Samples either side of an excursion drawn at full resolution.
const ZOOM_SAMPLES: f64 = 160.0;

/// The waveform of the given channel, else of the channel with the largest excursion.
fn waveform(
    r: &LinkReader,
    w: PageWindow,
    shape: AdcShape,
    adc: &AdcView,
    acc: &LinkAccumulator,
    given: Option<usize>,
) -> Waveform {
    let (channel, chosen) = match given {
        Some(c) => (c, "given"),
        None => {
            let best = adc
                .channels
                .iter()
                .filter(|c| c.samples > 0 && c.flag != "noisy")
                .max_by(|a, b| a.peak.abs().total_cmp(&b.peak.abs()));
            (
                best.map_or(0, |c: &ChannelStats| c.channel),
                "largest excursion",
            )
        }
    };
    let stats = &adc.channels[channel];
    let (low, high) = acc.envelope(channel, stats.baseline);
    let column_s = (0..w.columns).map(|i| w.column_s(i, w.columns)).collect();
    // Full resolution around the excursion: a second, short read of the chunks there.
    let tps = shape.ticks_per_sample();
    let peak = w.rel_at(stats.peak_s); // ticks after the window's start
    let from = w.start + (peak - ZOOM_SAMPLES * tps - shape.ticks_per_frame as f64).max(0.0) as u64;
    let to = w.start + (peak + ZOOM_SAMPLES * tps).max(0.0) as u64 + 1;
    let mut zoom = Vec::new();
    let mut values = vec![0u16; shape.channels];
    let fb = r.layout.frame_bytes as usize;
    let read = r.frames_between(from.max(w.start), to.min(w.end), |frames: &[u8]| {
        for f in frames.chunks_exact(fb) {
            let ts = r.layout.timestamp(f);
            for s in 0..shape.samples_per_frame {
                let (num, den) = shape.sample_offset_ticks(s);
                let t = (ts - w.start) as f64 + num as f64 / den as f64;
                if (t - peak).abs() <= ZOOM_SAMPLES * tps {
                    shape.sample(f, s, &mut values);
                    zoom.push((w.seconds(t), values[channel] as f64 - stats.baseline));
                }
            }
        }
        Ok::<(), ReadError>(())
    });
    if read.is_err() {
        zoom.clear(); // a chunk changed since the first read: the envelope still shows it
    }
    Waveform {
        channel,
        chosen,
        baseline: stats.baseline,
        column_s,
        low,
        high,
        zoom,
    }
}
