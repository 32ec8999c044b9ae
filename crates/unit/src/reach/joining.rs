//! The rule on joins: how far a trigger that comes while a burst is being recorded moves its
//! end, what stops it (the outputs' room, --max-burst), and what goes on as the next burst.

use std::time::Duration;

use snbuf_burst::opening::sizing;
use snbuf_burst::{AnsweredTrigger, Window};

use super::{BurstReach, JoinRefusal};
use crate::config::RecordConfig;
use crate::protocol::Joined;

/// Trigger `id`, whose window is `w`, joins the burst of `reach` (None: no burst is being
/// recorded) when its window begins at or after that burst's start (a second alert for the same
/// supernova, inside the burst or after its end): the end moves out to hold it, as far as the
/// outputs of `config` have room (what does not fit is said in the answer). Err says why it
/// cannot join (no burst, a window that begins before the burst's, a burst that is ending).
///
/// What bounds a burst grown by joins: each join moves the end to its own window's end and no
/// further (a window bounded by `--max-window`), so a burst grows no faster than the data while
/// triggers come; a burst stops at `--max-burst`, the rest going on as the next burst without a
/// gap (`Continuation`); and no file grows past the room `sizing` leaves on the outputs, so a
/// flood of joins cannot take the disk.
pub(crate) fn join(
    config: &RecordConfig,
    reach: Option<&BurstReach>,
    burst_id: &str,
    id: &str,
    w: &Window,
) -> Result<Joined, JoinRefusal> {
    let reach = reach.ok_or(JoinRefusal::NoBurst)?;
    if reach.burst_id() != burst_id {
        return Err(JoinRefusal::NotRecording(burst_id.to_string()));
    }
    if let Some(again) = answered_again(config, reach, id) {
        return Ok(again);
    }
    // Ending: the trigger waits for the unit to be free and records a burst of its own, even
    // one whose window begins before this burst (which it could not join).
    if reach.closed() {
        return Err(JoinRefusal::Ending);
    }
    let clock = config.clock();
    let burst = reach.window();
    let (start, end) = (burst.window_start_timestamp, burst.window_end_timestamp);
    begins_in_reach(reach, &burst, w)?;
    let step = reach.step_ticks;
    let wanted_end = w.window_end_timestamp.max(end);
    // The burst's cap, on the frame grid through its start: never before its end.
    let cap = start
        .saturating_add(clock.ticks(config.max_burst) / step * step)
        .max(end);
    let (new_end, region, room, wanted) =
        end_within_room(config, reach, &burst, wanted_end.min(cap));
    assert!(
        end <= new_end && new_end <= wanted_end.min(cap),
        "the end moves out, never in, no further than asked nor past the cap"
    );
    let continues = wanted_end > cap && new_end == cap;
    if !continues && new_end <= w.window_start_timestamp {
        // Its window begins after the burst's end, and the outputs hold nothing of it.
        return Err(JoinRefusal::NoRoom);
    }
    let covered_start = w.window_start_timestamp.max(start);
    let covered_end = w.window_end_timestamp.min(new_end);
    let here = (covered_start < new_end).then(|| {
        let mut a = AnsweredTrigger::whole(id, w);
        a.covered_start_timestamp = covered_start;
        a.covered_end_timestamp = covered_end;
        a
    });
    let more = Duration::from_secs_f64(clock.seconds(new_end - end).min(86_400.0));
    let mut joined = Joined {
        covered_start,
        covered_end: covered_end.max(covered_start),
        extended_by_s: clock.seconds(new_end - end),
        not_covered_s: None,
        not_covered_why: None,
        continued_in: None,
        begins_in: (covered_start > w.window_start_timestamp)
            .then(|| reach.chain().map(|c| c.previous.clone()))
            .flatten(),
    };
    let rest_fits = match continues {
        true => continuation_fits(config, reach, region, cap, w.window_end_timestamp),
        false => cap,
    };
    if continues && rest_fits > covered_start.max(cap) {
        let mut rest = AnsweredTrigger::whole(id, w);
        rest.covered_start_timestamp = covered_start.max(cap);
        rest.covered_end_timestamp = rest_fits;
        if rest_fits < w.window_end_timestamp {
            joined.not_covered_s = Some(clock.seconds(w.window_end_timestamp - rest_fits));
            joined.not_covered_why =
                Some("the output has no room for the rest of it in the next burst".into());
        }
        // Named after the chain's first burst: ROOT-2, ROOT-3, ... (the first free after this
        // one's place in the chain: never the root's own name, even once it is deleted).
        let next_name = snbuf_burst::names::free_name_after(
            &config.output_dir,
            &reach.chain_root(),
            reach.chain_index() + 1,
        )
        .ok_or(JoinRefusal::NoRoom)?;
        let next = reach.join_continued(here, rest, new_end, region, more, &next_name)?;
        joined.continued_in = Some(next);
        return Ok(joined);
    }
    let here = here.ok_or(JoinRefusal::NoRoom)?;
    reach.join(here, new_end, region, more)?;
    let short = w.window_end_timestamp - covered_end;
    if short > 0 {
        joined.not_covered_s = Some(clock.seconds(short));
        joined.not_covered_why = Some(format!(
            "the output has room for {} per link of the {} the longer window needs",
            snbuf_quantity::Bytes(room),
            snbuf_quantity::Bytes(wanted)
        ));
    }
    Ok(joined)
}

/// Refused when window `w` begins before the burst `burst` of `reach`, unless inside the bursts
/// that one continues (its part before is recorded in them) and not wholly before it (then the
/// bursts already written hold all of it: none can answer it now).
fn begins_in_reach(reach: &BurstReach, burst: &Window, w: &Window) -> Result<(), JoinRefusal> {
    let (start, end) = (burst.window_start_timestamp, burst.window_end_timestamp);
    let chain_start = reach.chain().map_or(start, |c| c.start);
    let wholly_before = w.window_end_timestamp <= start && w.window_start_timestamp < start;
    if w.window_start_timestamp < chain_start || wholly_before {
        return Err(JoinRefusal::BeginsBefore {
            start: w.window_start_timestamp,
            end: w.window_end_timestamp,
            burst_start: start,
            burst_end: end,
        });
    }
    debug_assert!(
        w.window_end_timestamp > start,
        "some of it lies in this burst or after"
    );
    Ok(())
}

/// How far the next burst (from `cap`) can hold a window that ends at `end`, given what the
/// burst of `reach` still needs to grow to `region` per link: `end`, or less, on the grid.
fn continuation_fits(
    config: &RecordConfig,
    reach: &BurstReach,
    region: u64,
    cap: u64,
    end: u64,
) -> u64 {
    assert!(cap < end, "a next burst is asked for only past the cap");
    let files = config.burst_files();
    let step = reach.step_ticks;
    let now = reach.now();
    let promised = now.unallocated_bytes_per_link + region.saturating_sub(now.region_bytes);
    let room = sizing::room_to_grow(&files, 0).saturating_sub(promised);
    let until = end.max(reach.continued_until().unwrap_or(end));
    let wanted = sizing::link_region(&files, (until - cap) / step + 1);
    if wanted.region_bytes <= room && wanted.limited_by.is_none() {
        return end;
    }
    let frames = sizing::frames_fitting(&files, room);
    let fits = cap.saturating_add(frames.saturating_mul(step));
    debug_assert!(fits >= cap, "a whole number of frames past the cap");
    fits.clamp(cap, end)
}

/// A trigger delivered again (its answer lost): the same answer, nothing recorded twice.
fn answered_again(config: &RecordConfig, reach: &BurstReach, id: &str) -> Option<Joined> {
    let clock = config.clock();
    let here = reach.answered_trigger(id);
    let next = reach.continued_trigger(id);
    let a = here.as_ref().or(next.as_ref().map(|(t, _)| t))?;
    debug_assert!(
        a.covered_end_timestamp <= a.window_end_timestamp,
        "a trigger is covered no further than it asked"
    );
    let covered_end = next
        .as_ref()
        .map_or(a.covered_end_timestamp, |(t, _)| t.covered_end_timestamp);
    let short = a.window_end_timestamp - covered_end;
    let covered_start = here
        .as_ref()
        .map_or(a.covered_start_timestamp, |t| t.covered_start_timestamp);
    Some(Joined {
        covered_start,
        begins_in: (covered_start > a.window_start_timestamp)
            .then(|| reach.chain().map(|c| c.previous.clone()))
            .flatten(),
        covered_end: here
            .as_ref()
            .map_or(covered_start, |t| t.covered_end_timestamp),
        extended_by_s: 0.0,
        not_covered_s: (short > 0).then(|| clock.seconds(short)),
        not_covered_why: (short > 0).then(|| "the output had no room for it".to_string()),
        continued_in: next.map(|(_, name)| name),
    })
}

/// How far the burst of `reach` may end toward `wanted_end`: there when the outputs have room
/// for it, else as far as the room goes, on the frame grid, never in. Returns the end, each
/// link's region for it, the room, and the region `wanted_end` would need.
fn end_within_room(
    config: &RecordConfig,
    reach: &BurstReach,
    burst: &Window,
    wanted_end: u64,
) -> (u64, u64, u64, u64) {
    // The window as the caller read it (`burst`), not again: a join meanwhile moves the end, and
    // the reach refuses nothing for it (`BurstReach::join` never moves the end in).
    let (start, end) = (burst.window_start_timestamp, burst.window_end_timestamp);
    let step = reach.step_ticks;
    let files = config.burst_files();
    let wanted = sizing::link_region(&files, (wanted_end.max(end) - start) / step + 1);
    let now = reach.now();
    // What the output has free is already promised in part: the files have yet to grow to the
    // window's region (a step at a time as they write).
    let room = sizing::room_to_grow(&files, now.region_bytes)
        .saturating_sub(now.unallocated_bytes_per_link)
        .max(now.region_bytes);
    let (new_end, region) = if wanted.region_bytes <= room && wanted.limited_by.is_none() {
        (
            wanted_end.max(end),
            wanted.region_bytes.max(now.region_bytes),
        )
    } else {
        let frames = sizing::frames_fitting(&files, room);
        let fit = start.saturating_add(frames.saturating_sub(1).saturating_mul(step));
        (
            fit.clamp(end, wanted_end.max(end)),
            room.max(now.region_bytes),
        )
    };
    debug_assert!(
        region >= now.region_bytes,
        "a link's file region only grows"
    );
    (new_end, region, room, wanted.wanted_bytes)
}
