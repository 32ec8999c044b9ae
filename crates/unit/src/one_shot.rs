//! `record`: a self-contained recording. Start the unit, buffer for `trigger_after` (and until
//! the burst's files are prepared: a unit is armed when it can start persisting at once),
//! trigger, record the window, seal, verify, stop.

use std::time::{Duration, Instant};

use crate::config::RecordConfig;
use crate::counters::Progress;
use crate::error::RecordError;
use crate::recorder::Unit;
use crate::status_file::{StatusFile, STATUS_FILE_INTERVAL};
use crate::summary::RecordSummary;
use crate::window::TriggerAt;

pub fn record(
    config: &RecordConfig,
    mut on_progress: impl FnMut(&Progress),
) -> Result<RecordSummary, RecordError> {
    let unit = Unit::start(config)?;
    let trigger_at = Instant::now() + config.trigger_after;
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    let mut status = config
        .status_file
        .as_deref()
        .map(|p| StatusFile::new(p).every(STATUS_FILE_INTERVAL));
    loop {
        let due = Instant::now() >= trigger_at;
        if due && !unit.preparing_next() {
            break;
        }
        std::thread::sleep(
            Duration::from_millis(20)
                .min(trigger_at.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(if due { 5 } else { 0 })),
        );
        let phase = if due { "preparing" } else { "buffering" };
        if let Some(file) = status.as_mut() {
            // Failures are reported once the burst records (same file, same error).
            let _ = file.update(&config.burst_id, None, false, || unit.progress(phase));
        }
        if Instant::now() >= next_tick {
            on_progress(&unit.progress(phase));
            next_tick += Duration::from_secs(1);
        }
    }
    let window = unit.window(TriggerAt::Now, config.pre, config.post)?;
    let mut report = unit.trigger(&window, &config.burst_id, &mut on_progress)?;
    assert_eq!(
        report.result.links.len(),
        config.links as usize,
        "a manifest record per link"
    );
    let (_, skipped) = unit.stop();
    report.result.skipped_at_source_per_link = skipped;
    Ok(report)
}
