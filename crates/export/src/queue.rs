//! Automatic export for a running unit (`snbuf serve --export-to URL`): sealed bursts queue up
//! and one worker thread exports them in turn, at the set rate, so that exporting never
//! competes with itself or starves recording. A failed export (store down, network cut) is
//! tried again later, resuming where it stopped; the queue and the figures are exposed as
//! Prometheus metrics.
//!
//! A unit and its object store may lose power together, and a store acknowledges an object
//! before it is sure to survive that (Garage commits its metadata lazily). So with
//! `--delete-after-verify` a local copy goes only at a second read-back, well after the first,
//! and a unit that starts reads back what it exported last: an object the store lost is found
//! missing and sent again from the copy still here.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::{export_burst, read_back_again, Destination, ExportOptions, ReadBack};

#[derive(Default)]
struct Queue {
    /// Bursts exported and verified that no one has collected yet (`take_exported`), bounded.
    exported: VecDeque<String>,
    /// Bursts waiting, with when each was queued (for the lag), and when to try again.
    waiting: VecDeque<(PathBuf, Instant, Instant)>,
    /// When the burst being exported was queued.
    current_since: Option<Instant>,
    /// Exported bursts to read back once more, and when. Not a backlog: they are exported.
    rereads: VecDeque<(PathBuf, Instant)>,
    /// A read-back is in progress.
    reading_back: bool,
    stop: bool,
}

#[derive(Default)]
pub struct ExportStats {
    pub bytes_total: AtomicU64,
    pub exported_total: AtomicU64,
    pub failures_total: AtomicU64,
}

pub struct ExportQueue {
    queue: Arc<(Mutex<Queue>, Condvar)>,
    stats: Arc<ExportStats>,
    /// Whether local copies go after export, and how long after its export a burst is read
    /// back again before that.
    delete_after_verify: bool,
    second_read_back_after: Duration,
    worker: Option<std::thread::JoinHandle<()>>,
}

/// Exported burst ids kept for `take_exported` (a fleet link collects them every second).
const MAX_UNCOLLECTED: usize = 1000;

/// How long a failed export waits before it is tried again (it resumes where it stopped).
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// What the worker does next.
enum Job {
    /// Export a burst (or resume its export), queued at `since`.
    Export { dir: PathBuf, since: Instant },
    /// Read an exported burst back once more.
    ReadBack { dir: PathBuf },
}

impl ExportQueue {
    /// Starts the worker, which logs one line per export and per failure. With
    /// `opts.delete_after_verify`, a burst's local copy goes only at a read-back
    /// `second_read_back_after` its export was first verified.
    pub fn start(
        dest: Destination,
        opts: ExportOptions,
        second_read_back_after: Duration,
    ) -> std::io::Result<ExportQueue> {
        let queue: Arc<(Mutex<Queue>, Condvar)> = Arc::default();
        let stats: Arc<ExportStats> = Arc::default();
        let delete_after_verify = opts.delete_after_verify;
        let worker = Worker {
            queue: queue.clone(),
            stats: stats.clone(),
            dest,
            opts,
            second_read_back_after,
        };
        let worker = std::thread::Builder::new()
            .name("snbuf-export".into())
            .spawn(move || {
                yield_to_recording();
                while let Some(job) = worker.next_job() {
                    match job {
                        Job::Export { dir, since } => worker.export(dir, since),
                        Job::ReadBack { dir } => worker.read_back(dir),
                    }
                }
            })?;
        Ok(ExportQueue {
            queue,
            stats,
            delete_after_verify,
            second_read_back_after,
            worker: Some(worker),
        })
    }

    /// An exported burst found at start (verified at `verified_unix_ns`): read back again now
    /// if the store may not have kept it yet (exported less than `second_read_back_after` ago)
    /// or if its local copy is to go (the read-back decides when).
    pub fn push_exported(&self, dir: PathBuf, verified_unix_ns: u64) {
        let age = snbuf_quantity::now_unix_ns().saturating_sub(verified_unix_ns);
        if age >= self.second_read_back_after.as_nanos() as u64 && !self.delete_after_verify {
            return;
        }
        let (lock, cv) = &*self.queue;
        lock.lock()
            .expect("export queue")
            .rereads
            .push_back((dir, Instant::now()));
        cv.notify_one();
    }

    /// Queues a sealed burst.
    pub fn push(&self, dir: PathBuf) {
        let (lock, cv) = &*self.queue;
        let now = Instant::now();
        lock.lock()
            .expect("export queue")
            .waiting
            .push_back((dir, now, now));
        cv.notify_one();
    }

    /// Prometheus families of the exporter.
    pub fn metrics_text(&self) -> String {
        let (queued, oldest) = self.backlog();
        let s = &self.stats;
        format!(
            "# HELP snbuf_export_bytes_total Bytes sent to the export destination.\n\
             # TYPE snbuf_export_bytes_total counter\n\
             snbuf_export_bytes_total {}\n\
             # HELP snbuf_export_bursts_total Bursts exported and verified, and export attempts that failed.\n\
             # TYPE snbuf_export_bursts_total counter\n\
             snbuf_export_bursts_total{{state=\"exported\"}} {}\n\
             snbuf_export_bursts_total{{state=\"failed_attempt\"}} {}\n\
             # HELP snbuf_export_queue_bursts Bursts waiting for export or being exported.\n\
             # TYPE snbuf_export_queue_bursts gauge\n\
             snbuf_export_queue_bursts {queued}\n\
             # HELP snbuf_export_lag_seconds How long the oldest burst not yet exported has waited (0: none).\n\
             # TYPE snbuf_export_lag_seconds gauge\n\
             snbuf_export_lag_seconds {oldest}\n",
            s.bytes_total.load(Ordering::Relaxed),
            s.exported_total.load(Ordering::Relaxed),
            s.failures_total.load(Ordering::Relaxed),
        )
    }

    /// Bursts waiting or being exported, and how long the oldest of them has waited (s).
    fn backlog(&self) -> (usize, f64) {
        let (lock, _) = &*self.queue;
        let g = lock.lock().expect("export queue");
        let oldest = g
            .waiting
            .iter()
            .map(|w| w.1)
            .chain(g.current_since)
            .min()
            .map(|t| t.elapsed().as_secs_f64())
            .unwrap_or(0.0);
        (g.waiting.len() + g.current_since.is_some() as usize, oldest)
    }

    /// Burst ids exported (and verified) since the last call, oldest first.
    pub fn take_exported(&self) -> Vec<String> {
        let (lock, _) = &*self.queue;
        lock.lock()
            .expect("export queue")
            .exported
            .drain(..)
            .collect()
    }

    /// The exporter at a glance, for a unit's heartbeat.
    pub fn progress(&self) -> ExportProgress {
        let (queued, lag) = self.backlog();
        ExportProgress {
            exported_total: self.stats.exported_total.load(Ordering::Relaxed),
            failed_attempts_total: self.stats.failures_total.load(Ordering::Relaxed),
            bytes_total: self.stats.bytes_total.load(Ordering::Relaxed),
            queued,
            lag_s: lag,
            read_backs_due: self.read_backs_due(),
        }
    }

    /// Exported bursts whose read-back is due or under way: at a start, those the last run
    /// exported within `second_read_back_after` (the store may have lost them with the power).
    fn read_backs_due(&self) -> usize {
        let (lock, _) = &*self.queue;
        let g = lock.lock().expect("export queue");
        let now = Instant::now();
        g.rereads.iter().filter(|w| w.1 <= now).count() + g.reading_back as usize
    }
}

/// The exporter's progress, as a unit's heartbeat carries it to the fleet.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExportProgress {
    /// Bursts exported and verified since the unit started.
    pub exported_total: u64,
    /// Attempts that failed (each is tried again).
    pub failed_attempts_total: u64,
    /// Bytes sent.
    pub bytes_total: u64,
    /// Bursts waiting or being exported, and how long the oldest of them has waited (s).
    pub queued: usize,
    pub lag_s: f64,
    /// Exported bursts being read back again now, or due to be (absent from older units: 0).
    #[serde(default)]
    pub read_backs_due: usize,
}

/// The export thread's side of the queue.
struct Worker {
    queue: Arc<(Mutex<Queue>, Condvar)>,
    stats: Arc<ExportStats>,
    dest: Destination,
    opts: ExportOptions,
    second_read_back_after: Duration,
}

impl Worker {
    /// The next job due, waiting for one; None once the queue stops. Exports come first: new
    /// data leaves before old data is checked again.
    fn next_job(&self) -> Option<Job> {
        let (lock, cv) = &*self.queue;
        let mut g = lock.lock().expect("export queue");
        loop {
            if g.stop {
                return None;
            }
            let now = Instant::now();
            if let Some(i) = g.waiting.iter().position(|w| w.2 <= now) {
                let (dir, since, _) = g.waiting.remove(i).expect("present");
                g.current_since = Some(since);
                return Some(Job::Export { dir, since });
            }
            if let Some(i) = g.rereads.iter().position(|w| w.1 <= now) {
                let (dir, _) = g.rereads.remove(i).expect("present");
                g.reading_back = true;
                return Some(Job::ReadBack { dir });
            }
            let wait = g
                .waiting
                .iter()
                .map(|w| w.2)
                .chain(g.rereads.iter().map(|w| w.1))
                .map(|due| due.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            g = cv.wait_timeout(g, wait).expect("export queue").0;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.0.lock().expect("export queue")
    }

    /// Exports (or resumes) the burst in `dir`, queued at `since`; tried again later on failure.
    fn export(&self, dir: PathBuf, since: Instant) {
        let s = &self.stats;
        let before = s.bytes_total.load(Ordering::Relaxed);
        // The local copy goes only at a second read-back (`read_back`).
        let once = ExportOptions {
            delete_after_verify: false,
            ..self.opts.clone()
        };
        let result = export_burst(&dir, &self.dest, &once, |sent| {
            s.bytes_total.store(before + sent, Ordering::Relaxed);
        });
        let mut g = self.lock();
        g.current_since = None;
        match result {
            Ok(r) => {
                s.exported_total.fetch_add(1, Ordering::Relaxed);
                if g.exported.len() == MAX_UNCOLLECTED {
                    g.exported.pop_front();
                }
                g.exported.push_back(
                    dir.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                );
                tracing::info!(
                    "exported {} to {} ({} objects, verified{})",
                    dir.display(),
                    r.destination,
                    r.objects.len(),
                    if self.opts.delete_after_verify {
                        format!(
                            "; its local copy goes after a second read-back in {} s",
                            self.second_read_back_after.as_secs()
                        )
                    } else {
                        String::new()
                    }
                );
                if self.opts.delete_after_verify {
                    g.rereads
                        .push_back((dir, Instant::now() + self.second_read_back_after));
                }
            }
            Err(e) => {
                s.failures_total.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "export of {} failed: {e}; trying again in {} s",
                    dir.display(),
                    RETRY_AFTER.as_secs()
                );
                g.waiting
                    .push_back((dir, since, Instant::now() + RETRY_AFTER));
            }
        }
    }

    /// Reads the exported burst in `dir` back once more. Intact: with delete-after-verify, its
    /// local copy goes once its export is `second_read_back_after` old (else it is read back
    /// again then). Lost: exported again from the local copy. The store silent: tried later.
    fn read_back(&self, dir: PathBuf) {
        if !dir.is_dir() {
            self.lock().reading_back = false;
            return; // removed meanwhile (by hand): nothing to check against
        }
        let result = read_back_again(&dir, &self.dest, self.opts.part_bytes);
        let mut g = self.lock();
        g.reading_back = false;
        match result {
            Ok(ReadBack::Intact { verified_unix_ns }) => {
                let age = Duration::from_nanos(
                    snbuf_quantity::now_unix_ns().saturating_sub(verified_unix_ns),
                );
                tracing::info!(
                    "{} read back again from {}: every object there",
                    dir.display(),
                    self.dest.describe()
                );
                if !self.opts.delete_after_verify {
                    return;
                }
                match self.second_read_back_after.checked_sub(age) {
                    // Old enough: it outlived whatever the store had not yet made durable.
                    None | Some(Duration::ZERO) => delete_exported(&dir),
                    Some(left) => g.rereads.push_back((dir, Instant::now() + left)),
                }
            }
            Ok(ReadBack::Lost(why)) => {
                tracing::warn!(
                    "{}: not in {} as exported ({why}); exporting it again",
                    dir.display(),
                    self.dest.describe()
                );
                let now = Instant::now();
                g.waiting.push_back((dir, now, now));
            }
            Err(e) => {
                tracing::warn!(
                    "{}: cannot read it back from {} ({e}); trying again in {} s",
                    dir.display(),
                    self.dest.describe(),
                    RETRY_AFTER.as_secs()
                );
                g.rereads.push_back((dir, Instant::now() + RETRY_AFTER));
            }
        }
    }
}

/// Deletes an exported burst's local copy, read back twice: logged either way (a copy that
/// cannot be deleted costs room, not data).
fn delete_exported(dir: &std::path::Path) {
    match snbuf_burst::outputs::remove_burst(dir) {
        Ok(()) => tracing::info!(
            "{}: read back twice from the store; local copy removed",
            dir.display()
        ),
        Err(e) => tracing::warn!(
            "{}: exported, but its local copy could not be removed: {e}",
            dir.display()
        ),
    }
}

impl Drop for ExportQueue {
    fn drop(&mut self) {
        let (lock, cv) = &*self.queue;
        lock.lock().expect("export queue").stop = true;
        cv.notify_all();
        // Not joined: an export in progress may take hours at its rate. Whatever it sent is in
        // its journal, and the next start resumes it.
        drop(self.worker.take());
    }
}

/// The export worker's priorities beside a unit that records: the lowest CPU priority (nice 19)
/// and the idle disk I/O class, so that reading a sealed burst back and sending it never takes
/// the CPU or the disk from the writers of the next burst (DUNE forwards a burst over hours; a
/// recording has seconds). Said once in the log when the system refuses either.
fn yield_to_recording() {
    if let Err(e) = snbuf_platform::cpu::set_current_thread_nice(EXPORT_NICE) {
        tracing::warn!("export: cannot lower its CPU priority ({e}); it competes with recording");
    }
    if let Err(e) = snbuf_platform::cpu::set_current_thread_io_idle() {
        tracing::warn!("export: cannot put its disk reads in the idle class ({e}); they compete with recording");
    }
}

/// The export worker's nice value: the lowest priority there is.
const EXPORT_NICE: i32 = 19;
