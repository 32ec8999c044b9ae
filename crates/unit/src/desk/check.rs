//! The desk's one check of a trigger, whatever its source, before anything is
//! allocated: a window no longer than `--max-window`, a safe burst id, a window the buffers can
//! still give (not wholly gone, not far in the future), and files that fit on the outputs (a
//! window that does not fit is taken cut, and the cut said in the answer; one where nothing
//! fits is refused). And a bound on what refusals cost: a flood of bad triggers is counted, not
//! logged line by line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use snbuf_burst::Window;

use super::decision::Refused;
use crate::protocol::TriggerRequest;
use crate::recorder::Unit;
use snbuf_burst::opening::sizing;

/// A trigger that passed every check: the window it records, decided now, and, when the
/// outputs cannot hold all of it, the end it asked for and why it is not recorded.
#[derive(Clone, Debug)]
pub struct CheckedTrigger {
    pub window: Window,
    pub cut: Option<Cut>,
}

/// A window cut short to what fits on the outputs: it is recorded to `window`'s end, and the
/// trigger's answer in the manifest keeps the end it asked for (`covered_end` short of it).
#[derive(Clone, Debug)]
pub struct Cut {
    pub asked_end: u64,
    pub why: String,
}

/// Checks trigger `req` against `unit` as it is now (see the module's comment). `new_burst`:
/// whether it would open a burst of its own, whose files must fit (one that joins the burst
/// being recorded is given what room there is by the join).
pub fn check(
    unit: &Unit,
    req: &TriggerRequest,
    new_burst: bool,
) -> Result<CheckedTrigger, Refused> {
    let config = unit.config();
    let at = req.at().map_err(Refused::Malformed)?;
    let pre =
        TriggerRequest::seconds(req.pre_s, "pre_s", config.pre).map_err(Refused::Malformed)?;
    let post =
        TriggerRequest::seconds(req.post_s, "post_s", config.post).map_err(Refused::Malformed)?;
    if pre + post == Duration::ZERO {
        return Err(Refused::EmptyWindow);
    }
    if pre + post > config.max_window {
        return Err(Refused::TooLong {
            pre_s: pre.as_secs_f64(),
            post_s: post.as_secs_f64(),
            max_s: config.max_window.as_secs_f64(),
        });
    }
    if let Some(id) = &req.burst_id {
        check_id(id)?;
    }
    let window = unit.window(at, pre, post)?;
    if !new_burst {
        return Ok(CheckedTrigger { window, cut: None });
    }
    match fits(unit, &window)? {
        None => Ok(CheckedTrigger { window, cut: None }),
        Some((end, why)) => {
            assert!(
                window.trigger_timestamp < end && end <= window.window_end_timestamp,
                "a cut window holds its trigger and ends no later than asked"
            );
            let mut cut = Window::new(
                window.trigger_timestamp,
                window.window_start_timestamp,
                end,
                config.clock().hz(),
            );
            cut.not_buffered_s = window.not_buffered_s;
            Ok(CheckedTrigger {
                window: cut,
                cut: Some(Cut {
                    asked_end: window.window_end_timestamp,
                    why,
                }),
            })
        }
    }
}

/// A trigger id that can name a burst: a plain name (`snbuf_burst::check_burst_id`).
pub fn check_id(id: &str) -> Result<(), Refused> {
    snbuf_burst::check_burst_id(id).map_err(|e| Refused::BadId(e.to_string()))
}

/// Whether `window`'s files fit on the outputs: None when they do; when only its start does,
/// the end of what fits (on the frame grid) and the cut in words; Err when not even the
/// trigger's own moment fits.
fn fits(unit: &Unit, window: &Window) -> Result<Option<(u64, String)>, Refused> {
    let config = unit.config();
    let step = unit.frame_step_ticks().max(1);
    let (start, end) = (window.window_start_timestamp, window.window_end_timestamp);
    assert!(start <= end, "a window starts before it ends");
    let files = config.burst_files();
    let wanted = sizing::link_region(&files, (end - start) / step + 1);
    // A prepared burst's files are given back when a larger window replaces them.
    let prepared = match unit.next_burst_state() {
        "none" => 0,
        _ => {
            let frames = files.window_frames(config.pre, config.post);
            sizing::link_region(&files, frames).region_bytes
        }
    };
    let room = sizing::room_to_grow(&files, prepared).min(wanted.region_bytes);
    if room >= wanted.wanted_bytes {
        return Ok(None);
    }
    let frames = sizing::frames_fitting(&files, room);
    let fit_end = start.saturating_add(frames.saturating_mul(step)).min(end);
    debug_assert!(
        start <= fit_end && fit_end <= end,
        "what fits is part of the window"
    );
    let clock = config.clock();
    if fit_end <= window.trigger_timestamp {
        return Err(Refused::NoRoom(format!(
            "no room on the outputs for the window: they have {} per link, the {:.1} s window needs {}, and what fits ends before the trigger",
            snbuf_quantity::Bytes(room),
            clock.seconds(end - start),
            snbuf_quantity::Bytes(wanted.wanted_bytes)
        )));
    }
    Ok(Some((
        fit_end,
        format!(
            "the outputs have room for {} per link of the {} this window needs: its first {:.1} s of {:.1} s are recorded, the last {:.1} s are not",
            snbuf_quantity::Bytes(room),
            snbuf_quantity::Bytes(wanted.wanted_bytes),
            clock.seconds(fit_end - start),
            clock.seconds(end - start),
            clock.seconds(end - fit_end)
        ),
    )))
}

/// How many refusals in a row are logged one by one; past that, until `QUIET_FOR` has passed,
/// they are counted and said in one line.
const LOGGED_PER_PERIOD: u32 = 10;
const QUIET_FOR: Duration = Duration::from_secs(10);

/// Refusals counted, and logged at a bounded rate.
#[derive(Default)]
pub struct Refusals {
    total: AtomicU64,
    period: Mutex<Period>,
}

#[derive(Default)]
struct Period {
    started: Option<Instant>,
    logged: u32,
    unlogged: u64,
}

impl Refusals {
    /// Counts a refusal for `why`; logs it unless this period has logged its share.
    pub fn refused(&self, unit_id: &str, why: &Refused) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut p = self.period.lock().expect("refusals");
        let now = Instant::now();
        if p.started.is_none_or(|s| now.duration_since(s) >= QUIET_FOR) {
            if p.unlogged > 0 {
                tracing::warn!(unit = %unit_id, refused = p.unlogged,
                    "more triggers refused in the last {} s than were logged", QUIET_FOR.as_secs());
            }
            *p = Period {
                started: Some(now),
                ..Period::default()
            };
        }
        if p.logged < LOGGED_PER_PERIOD {
            p.logged += 1;
            tracing::warn!(unit = %unit_id, reason = %why, "trigger refused");
        } else {
            p.unlogged += 1;
        }
        debug_assert!(
            p.logged <= LOGGED_PER_PERIOD,
            "a period logs at most its share"
        );
    }

    /// Every refusal since the unit started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}
