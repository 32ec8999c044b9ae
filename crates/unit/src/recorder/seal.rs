//! The second half of a burst: sealed and read back while the unit already records the next
//! one. A burst whose writers are done no longer holds the unit (`Unit::write` frees it), so a
//! trigger that comes while a large burst is sealed and verified (minutes, at DUNE's 1 TB a
//! burst) opens a burst of its own at once; the bursts being sealed still answer the triggers
//! they hold, so a trigger delivered again is never recorded twice.

use std::path::PathBuf;
use std::sync::Arc;

use snbuf_burst::{BurstSeal, Window};

use super::Unit;
use crate::counters::Progress;
use crate::error::RecordError;
use crate::reach::BurstReach;
use crate::status_file::StatusFile;
use crate::summary::{RecordResult, RecordSummary};
use crate::window_job::DynLink;

/// The bursts whose triggers a unit answers: the one being recorded, and those being sealed.
#[derive(Default)]
pub(super) struct Reaches {
    pub recording: Option<Arc<BurstReach>>,
    pub sealing: Vec<Arc<BurstReach>>,
    /// What the burst last written left to go on as the next one (--max-burst), whatever
    /// became of that burst: its triggers were told it would be recorded.
    pub continuation: Option<crate::reach::Continuation>,
}

/// A burst whose every link is done writing, not yet sealed: what `Unit::seal` needs to seal,
/// verify and report it.
pub struct WrittenBurst {
    pub(super) burst_id: String,
    pub(super) dir: PathBuf,
    pub(super) status: Option<StatusFile>,
    /// Its links' figures when the last of them was done.
    pub(super) last_progress: Progress,
    pub(super) seal: BurstSeal,
    pub(super) links: Vec<DynLink>,
    pub(super) chunks_from_source: u64,
    /// The window as recorded: its end where the last joined trigger moved it.
    pub(super) window: Window,
    pub(super) writer_cpu_s: f64,
    pub(super) writing_s: f64,
    pub(super) source_cpu_s: f64,
    pub(super) source_bytes: u64,
    pub(super) process_cpu_s: f64,
    pub(super) source_max_lag_s: f64,
    pub(super) survives_power_loss: bool,
    pub(super) prepared_ahead: bool,
    pub(super) cut_to_bytes_per_link: Option<u64>,
}

impl WrittenBurst {
    pub fn burst_id(&self) -> &str {
        &self.burst_id
    }

    /// The window as recorded.
    pub fn window(&self) -> &Window {
        &self.window
    }
}

impl Unit {
    /// The durability the sinks gave, as a recording's summary says it: voided (and said so)
    /// where an injected fault makes persists lie.
    fn durability_as_recorded(&self, of_sinks: &str) -> (String, bool) {
        let voiding: Vec<String> = (self.config.faults.iter())
            .filter(|f| f.kind.voids_durability())
            .map(|f| f.to_string())
            .collect();
        match voiding.is_empty() {
            true => (of_sinks.to_string(), false),
            false => {
                let said = format!(
                    "{of_sinks} (voided by injected faults: {})",
                    voiding.join(", ")
                );
                (said, true)
            }
        }
    }

    /// Seals burst `written` (its manifest, durable), reads it back (`verify`) and reports it.
    /// Runs beside the next burst's recording: it touches only this burst's files and the
    /// unit's read-only figures. A panic here is this burst's error, as while writing.
    pub fn seal(&self, written: WrittenBurst) -> Result<RecordSummary, RecordError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.seal_written(written)))
            .unwrap_or_else(|panic| Err(RecordError::Panicked(crate::error::panic_text(&*panic))))
    }

    fn seal_written(&self, written: WrittenBurst) -> Result<RecordSummary, RecordError> {
        let WrittenBurst {
            burst_id,
            dir,
            mut status,
            last_progress,
            seal,
            links,
            ..
        } = written;
        // The file shows the newest burst: once the next one records (this one sealed in the
        // background), this one's sealing would overwrite that state with an older burst's.
        let mut report_status = |phase: &'static str| {
            if let Some(file) = status.as_mut().filter(|_| !self.recording()) {
                let now = || Progress {
                    phase,
                    ..last_progress.clone()
                };
                if let Err(e) = file.update(&burst_id, Some(&dir), true, now) {
                    // A reporting channel, not the data: sealing goes on without it.
                    tracing::warn!("status file: {e}; it is no longer updated");
                    status = None;
                }
            }
        };
        report_status("sealing");
        let abandoned: Vec<u32> = links
            .iter()
            .filter(|l| l.abandoned())
            .map(|l| l.link())
            .collect();
        let mut manifest = seal.seal(links)?;
        debug_assert_eq!(
            manifest.burst_id, burst_id,
            "the manifest sealed is this burst's"
        );
        report_status("sealed");
        let (durability, voided) = self.durability_as_recorded(&manifest.durability);
        let verify = crate::summary::verify_sealed(&dir, &mut manifest, &abandoned)?;
        let config = &self.config;
        let fb = config.frame_type.frame_bytes() as u64;
        let frames_recorded: u64 = manifest.links.iter().map(|l| l.data.frames).sum();
        let lost_frames: u64 = manifest.links.iter().map(|l| l.lost_frames).sum();
        let produced = self.buffers[0].written();
        let ingest = self.ingest();
        let ingest = ingest.as_ref();
        let nic = ingest.and_then(|i| i.nic.clone());
        let result = RecordResult {
            burst_dir: dir,
            state: manifest.state,
            trigger: written.window,
            frame: manifest.frame.clone(),
            frame_bytes: fb as u32,
            frames_recorded,
            lost_frames,
            input_bytes_per_s: produced as f64 * fb as f64 * config.links as f64
                / self.started.elapsed().as_secs_f64(),
            output_bytes_per_s: frames_recorded as f64 * fb as f64 / written.writing_s,
            method: manifest.method.clone(),
            durability,
            survives_power_loss: written.survives_power_loss && !voided,
            prepared_ahead: written.prepared_ahead,
            window_cut_to_bytes_per_link: written.cut_to_bytes_per_link,
            buffer_memory_bytes: self.buffer_memory_bytes,
            buffer_page_bytes: self.buffer_page_bytes,
            buffer_numa_nodes: self.buffer_nodes.clone(),
            // Known once the links stop (`one_shot`).
            skipped_at_source_per_link: 0,
            source_max_lag_s: written.source_max_lag_s,
            writer_cpu_s: written.writer_cpu_s,
            writers: config.writers,
            chunks_from_source: written.chunks_from_source,
            source_cpu_s: written.source_cpu_s,
            source_bytes: written.source_bytes,
            process_cpu_s: written.process_cpu_s,
            // Derived below, from the figures above.
            source_cpu_core_s_per_gib: None,
            unit_cpu_core_s_per_gib: None,
            other_cpu_s: 0.0,
            cpu_core_s_per_gib: 0.0,
            links: manifest.links.clone(),
            ingest: ingest.map(|i| i.counters.iter().map(|c| c.snapshot()).collect()),
            ingest_gro: ingest.map(|i| i.gro),
            ingest_rcvbuf_bytes: ingest.map(|i| i.rcvbuf_bytes),
            ingest_nap_s: ingest.map(|i| i.nap.as_secs_f64()),
            ingest_receive_cpu: ingest.and_then(|i| i.receive_cpu),
            ingest_nic: nic.as_ref().map(|n| n.name.clone()),
            ingest_nic_numa_node: nic.as_ref().and_then(|n| n.node),
            valid: verify.valid,
            problems: verify.problems.clone(),
        }
        .with_cpu_figures();
        Ok(RecordSummary {
            result,
            ingest_nic: nic,
            manifest,
            verify,
        })
    }

    /// Burst `burst_id` is sealed and accounted for by its caller (kept in its history): its
    /// triggers are no longer answered here. The caller keeps them first, so that a trigger
    /// delivered again finds its burst in one place or the other.
    pub fn forget_sealed(&self, burst_id: &str) {
        let mut reaches = self.reaches.lock().expect("reaches");
        reaches.sealing.retain(|r| r.burst_id() != burst_id);
    }

    /// The burst, being recorded or sealed, that answers trigger `id`, if one does.
    pub fn answering(&self, id: &str) -> Option<String> {
        let reaches = self.reaches.lock().expect("reaches");
        reaches
            .recording
            .iter()
            .chain(reaches.sealing.iter())
            .find(|r| r.answered_trigger(id).is_some())
            .map(|r| r.burst_id())
    }

    /// The bursts being sealed and read back now, oldest first.
    pub fn sealing(&self) -> Vec<String> {
        let reaches = self.reaches.lock().expect("reaches");
        reaches.sealing.iter().map(|r| r.burst_id()).collect()
    }
}

impl Unit {
    /// What the burst last written left to go on as the next burst (--max-burst), once.
    pub(crate) fn take_continuation(&self) -> Option<crate::reach::Continuation> {
        let next = self.reaches.lock().expect("reaches").continuation.take();
        debug_assert!(
            next.as_ref().is_none_or(|c| !c.triggers.is_empty()),
            "a continuation carries a trigger over"
        );
        next
    }
}
