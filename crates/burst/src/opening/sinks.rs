//! Each link's file of a burst opened through the persistence engine, with the unit's method,
//! page size, sync mode and injected faults.

use std::path::Path;

use snbuf_persist::fault::{inject, FaultKind};
use snbuf_persist::sink::SourceMemory;
use snbuf_persist::{open, PersistError, Sink, SinkConfig};

use super::BurstFiles;

/// Tells the operator, once per process, that a latency buffer could not be registered with
/// io_uring and why (the writes still work; the kernel pins their pages per request instead).
fn say_once_if_source_not_registered(report: &snbuf_persist::SinkReport) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    let not = snbuf_persist::backends::uring::SOURCE_NOT_REGISTERED;
    if let Some(note) = report.notes.iter().find(|n| n.starts_with(not)) {
        if !SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!("{note}");
        }
    }
}

/// Opens one link's sink. `populate`: map and touch every page now (ahead of a trigger), or
/// leave the pages to the first writes (at a trigger, where time is short).
pub fn open_link_sink(
    files: &BurstFiles,
    link: u32,
    path: &Path,
    region_bytes: u64,
    stride: u64,
    populate: bool,
    source: Option<SourceMemory>,
) -> Result<Box<dyn Sink>, PersistError> {
    let mut c = SinkConfig::new(files.method, path, region_bytes);
    // The link's latency buffer, which its chunks are written from (io_uring registers it).
    c.source = source;
    c.max_io_bytes = stride as usize;
    c.page_size = files.page_size;
    c.sync_mode = files.sync_mode;
    c.populate = populate;
    c.completion_deadline = files.completion_deadline;
    let sink = open(&c)?;
    say_once_if_source_not_registered(sink.report());
    let faults: Vec<FaultKind> = files
        .faults
        .iter()
        .filter(|f| f.applies_to(link))
        .map(|f| f.kind)
        .collect();
    Ok(if faults.is_empty() {
        sink
    } else {
        Box::new(inject(sink, faults, files.completion_deadline))
    })
}
