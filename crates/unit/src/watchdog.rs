//! The watchdog of the writer threads. io_uring's waits end at the completion deadline, but a
//! `pwrite`, `fdatasync` or `msync` that blocks in the kernel on a dead device cannot be cut
//! short: its writer thread is stuck. Each writer beats once a round of its loop; the recorder
//! looks at the beats, and a writer silent for longer than the deadline (and a margin, so that
//! a sink's own deadline fires first where it can) is given up: its links are failed, the rest
//! of their windows counted lost, and the burst is sealed without waiting for it, from the
//! links as they stood at their last acknowledgement. If the thread ever returns it touches
//! nothing more: it was told it was given up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use snbuf_burst::WriteError;

use crate::counters::LiveLink;
use crate::window::frames_in_window;
use crate::window_job::{DynLink, WindowJob};

/// One writer thread as the watchdog sees it.
pub(crate) struct WriterWatch {
    started: Instant,
    /// Nanoseconds after `started` of the writer's last beat.
    beat_ns: AtomicU64,
    /// The watchdog gave this writer up: it must not touch its links again.
    given_up: AtomicBool,
    /// Its links as they stood at their last acknowledgement (no sinks), by position.
    links: Mutex<Vec<DynLink>>,
}

impl WriterWatch {
    pub fn new(links: &[DynLink]) -> Arc<WriterWatch> {
        assert!(!links.is_empty(), "a writer has links to watch over");
        Arc::new(WriterWatch {
            started: Instant::now(),
            beat_ns: AtomicU64::new(0),
            given_up: AtomicBool::new(false),
            links: Mutex::new(links.iter().map(|l| l.without_sink()).collect()),
        })
    }

    /// The writer is alive (once a round of its loop).
    pub fn beat(&self) {
        let ns = self.started.elapsed().as_nanos() as u64;
        self.beat_ns.store(ns, Ordering::Relaxed);
    }

    /// Link `i` of this writer was acknowledged up to where it stands now.
    pub fn acknowledged(&self, i: usize, link: &DynLink) {
        if let Ok(mut links) = self.links.lock() {
            debug_assert_eq!(links[i].link(), link.link(), "position {i} is this link");
            links[i] = link.without_sink();
        }
    }

    /// How long since the writer last beat.
    pub fn silent_for(&self) -> Duration {
        let beat = Duration::from_nanos(self.beat_ns.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(beat)
    }

    pub fn give_up(&self) {
        self.given_up.store(true, Ordering::Release);
    }

    pub fn given_up(&self) -> bool {
        self.given_up.load(Ordering::Acquire)
    }

    /// The links as they stood at their last acknowledgement.
    pub fn last_acknowledged(&self) -> Vec<DynLink> {
        match self.links.lock() {
            Ok(links) => links.iter().map(|l| l.without_sink()).collect(),
            Err(poisoned) => poisoned
                .get_ref()
                .iter()
                .map(|l| l.without_sink())
                .collect(),
        }
    }
}

/// How long a writer may be silent before it is given up: the completion deadline, and half
/// as much again (at least a second), so that a sink that can bound its own wait fails first.
pub(crate) fn silence_allowed(completion_deadline: Duration) -> Duration {
    let allowed = completion_deadline + (completion_deadline / 2).max(Duration::from_secs(1));
    assert!(
        allowed >= completion_deadline + Duration::from_secs(1),
        "a sink's own deadline fires at least a second before the watchdog"
    );
    allowed
}

/// A link whose writer the watchdog gave up (stuck in a call on its device): failed with why,
/// and every frame of its window not acknowledged counted lost, in its record and live. Then,
/// as for any link, durable + lost = the window's frames.
pub(crate) fn give_up_link(lw: &mut DynLink, live: &LiveLink, job: &WindowJob, silent: Duration) {
    let mut we = job.reach.now().end;
    while !job.reach.close_at(we) {
        we = job.reach.now().end;
    }
    let ws = job.window.window_start_timestamp;
    let tpf = job.ticks_per_frame;
    let record = lw.record().clone();
    let anchor = record.data.first_timestamp.unwrap_or(ws);
    let window = if we > ws {
        frames_in_window(ws, we, anchor, tpf)
    } else {
        0
    };
    let counted = record.data.frames + record.lost_frames;
    lw.add_lost_frames(window.saturating_sub(counted));
    assert!(
        lw.record().data.frames + lw.record().lost_frames >= window,
        "link {}: every frame of the window is in its record, durable or lost",
        record.link
    );
    live.fail();
    live.add_lost(window.saturating_sub(live.durable_frames() + live.lost_frames()));
    // Both only grow, whatever the writer given up still does.
    assert!(
        live.durable_frames() + live.lost_frames() >= window,
        "link {}: every frame of the window is shown durable or lost",
        record.link
    );
    live.set_overwritten(0);
    let path = std::path::PathBuf::from(&job.burst_id).join(&record.file);
    lw.abandon(&WriteError::Persist {
        link: record.link,
        cause: snbuf_persist::PersistError::Stalled {
            op: "a write or flush blocked in the kernel (the watchdog gave its writer up)",
            path,
            waited: Duration::from_millis(silent.as_millis() as u64),
        },
    });
    debug_assert!(
        lw.failed() && lw.abandoned(),
        "a link given up is failed and abandoned"
    );
}
