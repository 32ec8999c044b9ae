//! The exporter beside a server: every burst the server finishes is queued for export, and the
//! fleet link reads the exporter's progress.

use std::sync::Arc;

use snbuf_export::queue::ExportQueue;
use snbuf_unit::desk::TriggerDesk;

use crate::policy::EXPORT_FOLLOW_INTERVAL;

/// Queues for export every burst of the unit of `desk` that ends from now on, and those an earlier run
/// left unexported (sealed, failed or recovered, without `export.json`); those it exported are
/// handed over to be read back again where the queue's rule says (`push_exported`).
pub fn follow_bursts(desk: &Arc<TriggerDesk>, queue: Arc<ExportQueue>) -> std::io::Result<()> {
    let out = desk.unit().config().output_dir.clone();
    for e in std::fs::read_dir(&out)?.flatten() {
        let dir = e.path();
        if let Ok(m) = snbuf_burst::Manifest::read(&dir) {
            if m.state == snbuf_burst::BurstState::Recording {
                continue;
            }
            match snbuf_export::exported_at(&dir) {
                Some(at) => queue.push_exported(dir, at),
                None => queue.push(dir),
            }
        }
    }
    let desk = desk.clone();
    let mut seen = desk.recent_bursts().0;
    std::thread::Builder::new()
        .name("snbuf-export-follow".into())
        .spawn(move || loop {
            std::thread::sleep(EXPORT_FOLLOW_INTERVAL);
            let (total, recent) = desk.recent_bursts();
            assert!(total >= seen, "the count of finished bursts only grows");
            let new = (total - seen).min(recent.len() as u64) as usize;
            for b in &recent[recent.len() - new..] {
                // A burst that could not even be created has nothing to export.
                if b.state != snbuf_unit::protocol::OutcomeState::Error {
                    queue.push(out.join(&b.burst_id));
                }
            }
            seen = total;
        })?;
    Ok(())
}

/// The exporter as the fleet link sees it.
pub struct ExporterReport(pub Arc<ExportQueue>);

impl snbuf_fleet::unit_link::ExportReporter for ExporterReport {
    fn progress(&self) -> snbuf_export::queue::ExportProgress {
        self.0.progress()
    }
    fn take_exported(&self) -> Vec<String> {
        self.0.take_exported()
    }
}
