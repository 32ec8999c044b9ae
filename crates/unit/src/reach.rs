//! The reach of the burst being recorded: where its window ends, which moves out when a trigger
//! joins it (a second alert for the same supernova, a few seconds after the first), how long its
//! writers wait for data, how much file each link may fill, and the triggers it answers.
//!
//! Shared by three parties: the control server moves the end (`join`); each writer reads the end
//! at every turn and, when a link has reached it, closes the reach (`close_at`), after which the
//! end never moves again, so no link can finish a window that another then extends; the recorder
//! writes the triggers and the final window into the manifest.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use snbuf_burst::{AnsweredTrigger, Window};

use crate::config::RecordConfig;

mod continuation;
mod joining;

pub(crate) use continuation::Continuation;
pub use continuation::{Chain, Opening};
pub(crate) use joining::join;

/// With a trigger waiting for the burst to end, how long a link must have brought no frame to
/// be given up (`BurstReach::give_up_silent_links`): a detector link sends frames microseconds
/// apart, and one late by a moment still brings them.
pub(crate) const SILENT_LINK: Duration = Duration::from_millis(500);

/// `SILENT_LINK` for a link of `frames_per_s`: at least 20 of its frames' spacing, so that a
/// sparse or heavily sub-sampled link is not taken for dead between two of its frames.
pub(crate) fn silent_after(frames_per_s: f64) -> Duration {
    let spacing_s = if frames_per_s > 0.0 {
        20.0 / frames_per_s
    } else {
        0.0
    };
    SILENT_LINK.max(Duration::from_secs_f64(spacing_s.min(3_600.0)))
}

/// Why a trigger cannot join the burst being recorded. `Ending` and `NoBurst` are not refusals
/// of the trigger: the unit is about to be free, and the trigger opens a burst of its own (or
/// joins the burst that goes on past --max-burst).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefusal {
    #[error("no burst is being recorded")]
    NoBurst,
    #[error("burst {0} is no longer the one being recorded")]
    NotRecording(String),
    #[error("its window [{start}, {end}) begins before the burst's [{burst_start}, {burst_end}), whose first part is written")]
    BeginsBefore {
        start: u64,
        end: u64,
        burst_start: u64,
        burst_end: u64,
    },
    #[error("the burst is ending: its window can no longer move")]
    Ending,
    #[error("the burst was cancelled by an operator")]
    Cancelled,
    #[error("trigger {0} already joined this burst")]
    AlreadyJoined(String),
    #[error("the outputs have no room for any of its window beyond the burst's end")]
    NoRoom,
}

pub(crate) struct BurstReach {
    /// The burst's name: its directory. Its first trigger's id, unless that names something
    /// else in the output already (`Server::burst_name_for`).
    burst_id: String,
    inner: Mutex<Reach>,
    /// Ticks between a link's frames in this burst: its window grows in them.
    step_ticks: u64,
    /// The bursts this one continues (--max-burst), if any.
    chain: Option<Chain>,
}

struct Reach {
    /// The burst's window: its first trigger's, the end moved out by those that joined.
    window: Window,
    /// When a link with nothing more to read stops waiting for the rest of the window.
    give_up_at: Instant,
    /// A trigger waits for this burst to end: a link that has brought no frame for
    /// `SILENT_LINK` stops waiting now (it died), whatever `give_up_at` says.
    give_up_silent: bool,
    /// Bytes of file each link may fill (files grow to it as they need).
    region_bytes: u64,
    /// What the links' files have still to grow by, all together, to reach `region_bytes`:
    /// promised to the window, not yet taken from the output (they grow a step at a time
    /// ahead of their writes).
    unallocated_bytes: u64,
    links: u64,
    /// A link reached the end: the end is final.
    closed: bool,
    /// An operator cancelled the burst: no trigger moves its end out again.
    cancelled: bool,
    triggers: Vec<AnsweredTrigger>,
    /// The burst reached --max-burst: what goes on as the next burst.
    continuation: Option<Continuation>,
    /// The triggers it opened for (a continuation carries several over).
    opened_with: u64,
    /// Bumped at each join, so the recorder knows when to write the manifest again.
    version: u64,
}

/// What a writer reads at each turn.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Now {
    pub end: u64,
    pub give_up_at: Instant,
    /// Whether a link silent for `SILENT_LINK` stops waiting now.
    pub give_up_silent: bool,
    pub region_bytes: u64,
    /// Of `region_bytes`, what each link's file has yet to grow by, on average.
    pub unallocated_bytes_per_link: u64,
}

/// The burst's link files as they were opened.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkFiles {
    pub links: u32,
    /// Bytes each file has.
    pub allocated_bytes: u64,
    /// Bytes each file may fill: the window's, at least `allocated_bytes`.
    pub region_bytes: u64,
}

impl BurstReach {
    pub fn new(
        burst_id: &str,
        window: Window,
        triggers: Vec<AnsweredTrigger>,
        give_up_at: Instant,
        files: LinkFiles,
        step_ticks: u64,
        chain: Option<Chain>,
    ) -> BurstReach {
        assert!(step_ticks > 0, "a link's frames are some ticks apart");
        assert!(
            files.links > 0 && files.region_bytes >= files.allocated_bytes,
            "a burst has links, their files at most the window's size"
        );
        assert!(
            !triggers.is_empty()
                && triggers.iter().all(|t| {
                    t.covered_start_timestamp <= t.covered_end_timestamp
                        && t.covered_end_timestamp <= window.window_end_timestamp
                }),
            "a burst opens for some trigger, each one's covered part inside the window"
        );
        assert!(
            chain
                .as_ref()
                .is_none_or(|c| c.start <= window.window_start_timestamp),
            "a chain begins before the bursts that continue it"
        );
        BurstReach {
            burst_id: burst_id.to_string(),
            step_ticks,
            chain,
            inner: Mutex::new(Reach {
                window,
                give_up_at,
                give_up_silent: false,
                region_bytes: files.region_bytes,
                unallocated_bytes: (files.region_bytes - files.allocated_bytes)
                    * files.links as u64,
                links: files.links as u64,
                closed: false,
                cancelled: false,
                opened_with: triggers.len() as u64,
                triggers,
                continuation: None,
                version: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reach> {
        self.inner.lock().expect("the burst's reach")
    }

    pub fn now(&self) -> Now {
        let r = self.lock();
        debug_assert!(
            r.window.window_start_timestamp <= r.window.window_end_timestamp,
            "a window starts before it ends"
        );
        Now {
            end: r.window.window_end_timestamp,
            give_up_at: r.give_up_at,
            give_up_silent: r.give_up_silent,
            region_bytes: r.region_bytes,
            unallocated_bytes_per_link: r.unallocated_bytes.div_ceil(r.links),
        }
    }

    /// A link's file grew by `bytes`: that much of what the window was promised is taken.
    pub fn allocated(&self, bytes: u64) {
        let mut r = self.lock();
        r.unallocated_bytes = r.unallocated_bytes.saturating_sub(bytes);
    }

    /// A link has reached `end` (read from `now`) and would finish: true when the window still
    /// ends there, and from now on always will; false when a trigger moved it out meanwhile
    /// (the link goes on to the new end).
    pub fn close_at(&self, end: u64) -> bool {
        let mut r = self.lock();
        debug_assert!(
            end >= r.window.window_start_timestamp,
            "an end read from the reach is at or after the window's start"
        );
        // Moved out by a join, or in by a cancel (to past every frame any writer has read):
        // either way the link reads the new end and goes on.
        if r.window.window_end_timestamp != end {
            return false;
        }
        r.closed = true;
        true
    }

    /// Trigger `t` joins: the window's end moves out to `end` (never in), the writers wait
    /// `more` longer for data, and each link's file may grow to `region_bytes`. Err when a link
    /// has already finished the window (the burst is ending: the trigger must wait for it).
    pub fn join(
        &self,
        t: AnsweredTrigger,
        end: u64,
        region_bytes: u64,
        more: Duration,
    ) -> Result<(), JoinRefusal> {
        let mut r = self.lock();
        Self::may_join(&r, &t.trigger_id)?;
        Self::join_locked(&mut r, t, end, region_bytes, more);
        Ok(())
    }

    /// As `join`, for a trigger whose window reaches past the burst's cap (--max-burst; `end`
    /// is the cap): `here` is its part in this burst (None when its window begins at the cap
    /// or later), `rest` its part past the cap, recorded in the next burst, which is named
    /// `next_name` unless an earlier trigger named it already. Returns the next burst's name.
    pub fn join_continued(
        &self,
        here: Option<AnsweredTrigger>,
        rest: AnsweredTrigger,
        end: u64,
        region_bytes: u64,
        more: Duration,
        next_name: &str,
    ) -> Result<String, JoinRefusal> {
        let mut r = self.lock();
        Self::may_join(&r, &rest.trigger_id)?;
        assert!(
            rest.covered_start_timestamp >= end && end >= r.window.window_end_timestamp,
            "the next burst starts where this one is capped, never before its end"
        );
        match here {
            Some(t) => Self::join_locked(&mut r, t, end, region_bytes, more),
            None => {
                Self::join_locked_end(&mut r, end, region_bytes, more);
                r.version += 1;
            }
        }
        let hz = r.window.clock_hz;
        let chain = Chain {
            previous: self.burst_id.clone(),
            root: self.chain_root(),
            start: self.chain_start(&r),
            index: self.chain_index() + 1,
        };
        let next = match r.continuation.as_mut() {
            Some(c) => {
                c.add(rest);
                c.burst_id.clone()
            }
            None => {
                let c = Continuation::new(next_name.to_string(), end, rest, hz, chain);
                let name = c.burst_id.clone();
                r.continuation = Some(c);
                name
            }
        };
        Ok(next)
    }

    /// Refused when the burst is ending or cancelled, or took trigger `id` already (in this
    /// burst or in its continuation).
    fn may_join(r: &Reach, id: &str) -> Result<(), JoinRefusal> {
        if r.closed {
            return Err(JoinRefusal::Ending);
        }
        if r.cancelled {
            return Err(JoinRefusal::Cancelled);
        }
        let next = r.continuation.iter().flat_map(|c| c.triggers.iter());
        if r.triggers.iter().chain(next).any(|a| a.trigger_id == id) {
            return Err(JoinRefusal::AlreadyJoined(id.to_string()));
        }
        Ok(())
    }

    /// The end moves out to `end` (never in), the writers wait `more` longer, the files may
    /// grow to `region_bytes`.
    fn join_locked_end(r: &mut Reach, end: u64, region_bytes: u64, more: Duration) {
        if end > r.window.window_end_timestamp {
            let hz = r.window.clock_hz.unwrap_or(1).max(1) as f64;
            r.window.window_end_timestamp = end;
            r.window.post_s = Some((end - r.window.trigger_timestamp) as f64 / hz);
            r.give_up_at += more;
        }
        if region_bytes > r.region_bytes {
            r.unallocated_bytes += (region_bytes - r.region_bytes) * r.links;
            r.region_bytes = region_bytes;
        }
    }

    fn join_locked(r: &mut Reach, t: AnsweredTrigger, end: u64, region_bytes: u64, more: Duration) {
        assert!(
            t.covered_end_timestamp <= end.max(r.window.window_end_timestamp),
            "what a trigger is told is covered is inside the window"
        );
        debug_assert!(
            t.covered_start_timestamp <= t.covered_end_timestamp,
            "a trigger's covered part starts before it ends"
        );
        Self::join_locked_end(r, end, region_bytes, more);
        r.triggers.push(t);
        r.version += 1;
        // Not cancelled (a cancel bumps the version too, and then refuses every join); a join
        // wholly past the cap bumps it without a trigger here.
        debug_assert!(
            r.triggers.len() as u64 <= r.opened_with + r.version,
            "one version at least per trigger that joined"
        );
    }

    /// An operator cancelled the burst: its end moves in to `end` (on the frame grid through
    /// the window's start, never before the trigger, never out), the writers finish there, and
    /// the burst is sealed with what they wrote; each trigger's covered part ends there too.
    /// `end` must lie past every frame a writer may have read (the caller gives the newest
    /// buffered frame and a margin). Returns the end; Err when a link has already reached it
    /// (the burst is ending anyway).
    pub fn cancel(&self, end: u64) -> Result<u64, String> {
        let mut r = self.lock();
        if r.closed {
            return Err("the burst is already ending: a link has reached its end".into());
        }
        let (start, trigger) = (r.window.window_start_timestamp, r.window.trigger_timestamp);
        let step = self.step_ticks.max(1);
        // Saturating: a stream's clock may sit at the end of its range.
        let end = start.saturating_add(
            end.max(trigger)
                .saturating_sub(start)
                .div_ceil(step)
                .saturating_mul(step),
        );
        if end >= r.window.window_end_timestamp {
            // The end stays, but nothing goes on past an operator's cancel.
            if r.continuation.take().is_some() {
                r.cancelled = true;
                r.version += 1;
            }
            return Ok(r.window.window_end_timestamp);
        }
        let hz = r.window.clock_hz.unwrap_or(1).max(1) as f64;
        r.cancelled = true;
        // Nothing goes on past an operator's cancel.
        r.continuation = None;
        r.window.window_end_timestamp = end;
        r.window.post_s = Some((end - trigger) as f64 / hz);
        for t in r.triggers.iter_mut() {
            t.covered_end_timestamp = t.covered_end_timestamp.min(end);
            t.covered_start_timestamp = t.covered_start_timestamp.min(end);
        }
        debug_assert!(
            r.triggers
                .iter()
                .all(|t| t.covered_start_timestamp <= t.covered_end_timestamp),
            "each trigger's covered part still starts before it ends"
        );
        r.version += 1;
        Ok(end)
    }

    /// A link with nothing more to read stops waiting by `by` at the latest.
    pub fn give_up_no_later_than(&self, by: Instant) {
        let mut r = self.lock();
        r.give_up_at = r.give_up_at.min(by);
    }

    /// A trigger waits for this burst to end (it cannot join it): a link that has brought
    /// nothing for `SILENT_LINK` is given up now rather than a buffer and more after the end
    /// was due, so that the trigger's window start is still in the buffers when the unit is
    /// free. Only a silent link: one merely late still brings its frames, and finishes.
    pub fn give_up_silent_links(&self) {
        self.lock().give_up_silent = true;
    }

    /// A link reached the end, or the writers are done: the end is final.
    pub fn closed(&self) -> bool {
        self.lock().closed
    }

    /// The burst's writers are done: its end is final, whatever a link did or did not close.
    pub fn close(&self) {
        self.lock().closed = true;
    }

    /// Bumped at each join: whether `answered` has news.
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// The window and the triggers answered, with a version that changes at each join.
    pub fn answered(&self) -> (u64, Window, Vec<AnsweredTrigger>) {
        let r = self.lock();
        debug_assert!(!r.triggers.is_empty(), "a burst answers its first trigger");
        (r.version, r.window.clone(), r.triggers.clone())
    }

    /// Trigger `id` as this burst answers it, if it does.
    pub fn answered_trigger(&self, id: &str) -> Option<AnsweredTrigger> {
        self.lock()
            .triggers
            .iter()
            .find(|t| t.trigger_id == id)
            .cloned()
    }

    /// Trigger `id`'s part past the cap, as the next burst will answer it, and that burst's
    /// name, if the trigger reached past the cap.
    pub fn continued_trigger(&self, id: &str) -> Option<(AnsweredTrigger, String)> {
        let r = self.lock();
        let c = r.continuation.as_ref()?;
        let t = c.triggers.iter().find(|t| t.trigger_id == id)?;
        Some((t.clone(), c.burst_id.clone()))
    }

    /// What goes on as the next burst, once the writers are done (`close`): taken once.
    pub fn take_continuation(&self) -> Option<Continuation> {
        let mut r = self.lock();
        assert!(
            r.closed,
            "the continuation is taken once the burst's end is final"
        );
        r.continuation.take()
    }

    /// Where the next burst's window ends so far, if the burst reached its cap.
    pub fn continued_until(&self) -> Option<u64> {
        let r = self.lock();
        r.continuation
            .as_ref()
            .map(|c| c.window.window_end_timestamp)
    }

    /// The name of the next burst, if the burst reached its cap.
    pub fn continued_in(&self) -> Option<String> {
        self.lock()
            .continuation
            .as_ref()
            .map(|c| c.burst_id.clone())
    }

    /// Where the chain of bursts this one belongs to began: its own start, or that of the first
    /// burst it continues.
    fn chain_start(&self, r: &Reach) -> u64 {
        self.chain
            .as_ref()
            .map_or(r.window.window_start_timestamp, |c| c.start)
    }

    /// The first burst of the chain this one belongs to: itself, or the first it continues.
    pub fn chain_root(&self) -> String {
        self.chain
            .as_ref()
            .map_or_else(|| self.burst_id.clone(), |c| c.root.clone())
    }

    /// This burst's place in its chain: 1 for a burst that continues none.
    pub fn chain_index(&self) -> u32 {
        self.chain.as_ref().map_or(1, |c| c.index)
    }

    /// The burst this one continues, and where its chain began, if it continues one.
    pub fn chain(&self) -> Option<&Chain> {
        self.chain.as_ref()
    }

    /// The burst's name.
    pub fn burst_id(&self) -> String {
        self.burst_id.clone()
    }

    /// The burst's window as it is now.
    pub fn window(&self) -> Window {
        self.lock().window.clone()
    }
}

/// When the writers of `window` stop waiting for data that does not come: when the window's
/// end is due at the configured rate, plus the buffer's length and 2 s of grace. A stream
/// whose data clock runs slower than the wall clock (a detector replayed slowly, a test stand)
/// takes longer by the wall clock to reach the window's end: as measured in `rates`, up to 50
/// times (a link that stuttered as it was measured must not hold the burst, and the triggers it
/// refuses meanwhile, for ever).
pub(crate) fn give_up_at(
    config: &RecordConfig,
    window: &Window,
    newest: Option<u64>,
    rates: &[crate::link_rates::LinkRate],
) -> Instant {
    let newest = newest.unwrap_or(window.window_start_timestamp);
    let ahead_s = config
        .clock()
        .seconds(window.window_end_timestamp.saturating_sub(newest));
    let slowest = rates
        .iter()
        .filter_map(|r| r.clock_ratio)
        .filter(|r| r.is_finite() && *r > 0.0)
        .fold(1.0_f64, f64::min)
        .max(0.02);
    debug_assert!(
        (0.02..=1.0).contains(&slowest),
        "a wait stretched by at most 50 times"
    );
    Instant::now()
        + Duration::from_secs_f64((ahead_s / slowest).min(86_400.0))
        + config.buffer
        + Duration::from_secs(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sparse link is not taken for dead between two of its frames; a dense one after
    /// `SILENT_LINK`; a link of no known rate after `SILENT_LINK` too.
    #[test]
    fn a_link_is_silent_after_half_a_second_or_twenty_of_its_frames() {
        assert_eq!(silent_after(30_000.0), SILENT_LINK);
        assert_eq!(silent_after(10.0), Duration::from_secs(2));
        assert_eq!(silent_after(0.0), SILENT_LINK);
        assert_eq!(silent_after(f64::NAN), SILENT_LINK);
    }

    fn reach() -> BurstReach {
        let w = Window::new(1_000, 500, 2_000, 1_000);
        BurstReach::new(
            "t1",
            w.clone(),
            vec![AnsweredTrigger::whole("t1", &w)],
            Instant::now(),
            LinkFiles {
                links: 2,
                allocated_bytes: 4 << 20,
                region_bytes: 4 << 20,
            },
            25,
            None,
        )
    }

    fn joining(id: &str, end: u64) -> AnsweredTrigger {
        AnsweredTrigger::whole(id, &Window::new(1_500, 1_000, end, 1_000))
    }

    /// Files smaller than the window grow as the writers go: what they have yet to grow by is
    /// promised, and a join's room leaves it out (`join` subtracts it from the free space).
    #[test]
    fn what_the_files_have_yet_to_grow_by_is_kept_until_they_grow() {
        let w = Window::new(1_000, 500, 2_000, 1_000);
        let files = LinkFiles {
            links: 2,
            allocated_bytes: 4 << 20,
            region_bytes: 10 << 20,
        };
        let r = BurstReach::new(
            "t1",
            w.clone(),
            vec![AnsweredTrigger::whole("t1", &w)],
            Instant::now(),
            files,
            25,
            None,
        );
        assert_eq!(r.now().unallocated_bytes_per_link, 6 << 20);
        r.allocated(6 << 20);
        assert_eq!(r.now().unallocated_bytes_per_link, 3 << 20);
        // A join that moves the region out promises that much more to every link.
        r.join(joining("t2", 3_000), 3_000, 12 << 20, Duration::ZERO)
            .unwrap();
        assert_eq!(r.now().unallocated_bytes_per_link, 5 << 20);
        r.allocated(100 << 20);
        assert_eq!(r.now().unallocated_bytes_per_link, 0, "never below nothing");
    }

    #[test]
    fn a_join_moves_the_end_out_never_in_and_is_listed() {
        let r = reach();
        let t0 = r.now().give_up_at;
        r.join(joining("t2", 3_000), 3_000, 8 << 20, Duration::from_secs(1))
            .unwrap();
        let now = r.now();
        assert_eq!(now.end, 3_000);
        assert_eq!(now.region_bytes, 8 << 20);
        assert_eq!(now.give_up_at - t0, Duration::from_secs(1));
        // Inside the window already: listed, the end unchanged, no more wait.
        r.join(joining("t3", 2_500), 2_500, 1 << 20, Duration::ZERO)
            .unwrap();
        let (version, w, triggers) = r.answered();
        assert_eq!((version, w.window_end_timestamp), (2, 3_000));
        assert_eq!(w.post_s, Some(2.0), "post_s follows the end");
        let ids: Vec<&str> = triggers.iter().map(|t| t.trigger_id.as_str()).collect();
        assert_eq!(ids, ["t1", "t2", "t3"]);
        assert!(r
            .join(joining("t2", 3_000), 3_000, 0, Duration::ZERO)
            .is_err());
    }

    #[test]
    fn once_a_link_finished_the_end_is_final() {
        let r = reach();
        // A link read the end before a join moved it: it must not finish.
        let seen = r.now().end;
        r.join(joining("t2", 2_600), 2_600, 0, Duration::ZERO)
            .unwrap();
        assert!(!r.close_at(seen), "the end moved: the link goes on");
        assert!(r.close_at(r.now().end));
        let e = r.join(joining("t3", 2_700), 2_700, 0, Duration::ZERO);
        assert_eq!(e.unwrap_err(), JoinRefusal::Ending);
        assert_eq!(r.now().end, 2_600);
    }
}
