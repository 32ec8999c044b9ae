//! What a unit does with one delivered trigger, from either path (JetStream's copy or the fast
//! path's): decided under the link's decision lock, in the order that makes "exactly once, or
//! said" hold (journal, data clock, window left, the unit's answer), then said and published.
//! A trigger that waits for a burst in progress waits on its own task, holding nothing.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, AckKind};
use snbuf_unit::desk::{self, Patience, Refused, FIRST_FRAME_WAIT};
use snbuf_unit::protocol::{At, TriggerRequest};

use crate::journal::{Outcome, Route};
use crate::link_state::{publish_event, publish_owed, Link};
use crate::schema::*;
use snbuf_quantity::now_unix_ns;

/// Handles one delivered trigger. Ok: its outcome is kept (recorded, joined to the burst being
/// recorded, missed, a duplicate, or malformed and ignored) and it may be acknowledged; Err: it
/// could not be kept, and must not be.
///
/// `msg` is the JetStream delivery, or None for the fast path's copy or one read from the
/// stream on reconnecting (`route` says which).
/// The largest trigger message read: a real one is a few hundred bytes.
const MAX_TRIGGER_BYTES: usize = 64 << 10;

pub(crate) async fn handle_trigger(
    js: &jetstream::Context,
    link: &Link,
    payload: &[u8],
    msg: Option<&jetstream::Message>,
    route: Route,
) -> Result<(), String> {
    debug_assert_eq!(
        msg.is_some(),
        route == Route::JetStream,
        "a JetStream copy comes with its delivery"
    );
    if payload.len() > MAX_TRIGGER_BYTES {
        link.say(&format!(
            "NATS: a trigger of {} bytes ignored (at most {MAX_TRIGGER_BYTES}): {}",
            payload.len(),
            String::from_utf8_lossy(&payload[..200])
        ));
        return Ok(());
    }
    let t: TriggerMessage = match serde_json::from_slice(payload) {
        Ok(t) => t,
        Err(e) => {
            link.say(&format!(
                "NATS: malformed trigger ignored ({e}): {}",
                String::from_utf8_lossy(&payload[..payload.len().min(200)])
            ));
            return Ok(());
        }
    };
    let id = t.trigger_id.clone();
    let config = link.desk.unit().config();
    // How late it came (issue to delivery): what `late` says, whatever it then waits for.
    let arrived_s = now_unix_ns().saturating_sub(t.issued_unix_ns) as f64 / 1e9;
    // A burst in progress that this trigger cannot join holds the unit: the trigger waits for
    // it (its window stays in the buffer for about the buffer's length), heartbeats and the
    // other path going on, rather than being refused.
    let first_look = Instant::now();
    let mut progress_sent = Instant::now();
    loop {
        let (decided, delay_s) = {
            let _one = link.decide.lock().await;
            // From its issue to this decision: what the journal keeps as how late it was handled.
            let delay_s = now_unix_ns().saturating_sub(t.issued_unix_ns) as f64 / 1e9;
            (decide(link, &t, (msg, route), delay_s), delay_s)
        };
        match decided {
            Look::Done(outcome) => return finish(js, link, &t, route, outcome, arrived_s).await,
            Look::Wait(w) if first_look.elapsed() < w.bound(config.buffer) && !link.stopping() => {
                let nap = match w {
                    Holdup::FirstFrame { .. } => Duration::from_millis(10),
                    Holdup::Burst(_) => Duration::from_millis(100),
                };
                tokio::time::sleep(nap).await;
                if progress_sent.elapsed() > Duration::from_secs(1) {
                    progress_sent = Instant::now();
                    // Still being handled: JetStream must not deliver it again meanwhile.
                    if let Some(msg) = msg {
                        let _ = msg.ack_with(AckKind::Progress).await;
                    }
                }
            }
            Look::Wait(w) => {
                let why = w.why();
                let kept = keep_missed(link, &id, &why, delay_s, (msg, route));
                return finish(js, link, &t, route, kept, arrived_s).await;
            }
        }
    }
}

/// What one look at a trigger came to.
enum Look {
    /// Its outcome is decided (and, where it has one, in the journal).
    Done(Result<Handling, String>),
    /// Not yet: look again in a moment (nothing is in the journal).
    Wait(Holdup),
}

/// What a trigger that cannot be decided yet waits for.
enum Holdup {
    /// A burst is being recorded that it cannot join: the unit is free once its writers are done.
    Burst(String),
    /// No frame has come yet: the unit has no data clock to place the trigger on. `post`: how
    /// far its window reaches past its issue (a frame that comes later holds none of it).
    FirstFrame { post: Duration },
}

impl Holdup {
    /// Why it is missed if the wait ends first.
    fn why(&self) -> String {
        match self {
            Holdup::Burst(why) => format!("refused: {why}"),
            Holdup::FirstFrame { post } => format!(
                "no frame has arrived within {:.1} s: this unit has no data clock to place the trigger on",
                first_frame_wait(*post).as_secs_f64()
            ),
        }
    }

    /// The longest it waits, from its first look: a burst in the way, as long as the buffer
    /// keeps the trigger's window; the first frame, as long as one could still hold part of it.
    fn bound(&self, buffer: Duration) -> Duration {
        match self {
            Holdup::Burst(_) => buffer,
            Holdup::FirstFrame { post } => first_frame_wait(*post),
        }
    }
}

/// How long a trigger waits for a unit's first frame: until its window's end has passed (a
/// frame after that holds none of it; a second more for the frame's way to the buffer), and at
/// least `FIRST_FRAME_WAIT`, as over the socket.
fn first_frame_wait(post: Duration) -> Duration {
    FIRST_FRAME_WAIT.max(post + Duration::from_secs(1))
}

/// A trigger's outcome, to be said and published outside the decision.
enum Handling {
    /// The other path's copy of a trigger already handled: nothing to say.
    SecondCopy,
    /// Handled before: a redelivery or a second sender.
    Duplicate,
    Recording(Box<snbuf_unit::protocol::TriggerReply>),
    Missed(String),
}

/// Decides trigger `t` now, under the link's decision lock: duplicate, missed, taken by the
/// unit, or waiting for the burst in progress. What the unit decides is in the journal before
/// this returns (an Err when it cannot be kept).
///
/// The order is the exactly-once argument: the journal first, then the data clock, then whether
/// the window has left the buffer, then the unit's answer.
fn decide(
    link: &Link,
    t: &TriggerMessage,
    (msg, route): (Option<&jetstream::Message>, Route),
    delay_s: f64,
) -> Look {
    let id = &t.trigger_id;
    let unit = link.desk.unit();
    let config = unit.config();
    // An id that is no plain name is refused before it names anything on this host (as a
    // path, it could say whether a file exists there).
    if let Err(e) = snbuf_burst::check_burst_id(id) {
        let refused = Refused::BadId(e.to_string());
        link.desk.count_refusal(&refused);
        let why = format!("refused: {refused}");
        return Look::Done(keep_missed(link, id, &why, delay_s, (msg, route)));
    }
    if let Some(again) = handled_before(link, id, msg.is_none()) {
        return Look::Done(Ok(again));
    }
    // "Now", or a wall-clock time, in this unit's data clock: its newest frame, moved by the
    // wall-clock time since (a trigger issued 0.3 s ago is 0.3 s of detector time before the
    // newest frame). Right whatever the detector's clock is offset from this machine's (a timing
    // system not on NTP time, a replay of last year's run). A detector timestamp is taken as it is.
    let at = match (t.at_ticks, t.at_unix_ns) {
        (Some(ticks), _) => Some(ticks),
        (None, Some(ns)) => unit.data_time_at(ns),
        (None, None) => unit.data_time_at(t.issued_unix_ns),
    };
    let Some(at) = at else {
        // Nothing buffered yet (a unit just started, a sender not yet flowing): no data clock
        // to place a wall-clock time on. It waits for the first frame, as over the socket, and
        // is missed only if none comes while its window could still be recorded.
        let post = t.post_s.unwrap_or(config.post.as_secs_f64());
        return Look::Wait(Holdup::FirstFrame {
            post: Duration::from_secs_f64(post.clamp(0.0, 86_400.0)),
        });
    };
    // Has the whole window already left this unit's buffer (the unit was down)?
    let post = t.post_s.unwrap_or(config.post.as_secs_f64());
    let clock = config.clock();
    let oldest = unit.oldest_timestamp().unwrap_or(at);
    let window_end = clock.offset(at, post.clamp(0.0, 86_400.0));
    if window_end < oldest {
        let why = format!(
            "delivered {delay_s:.1} s after it was issued (this unit was not running or not connected): its window ends {:.1} s before the oldest frame in the {:.0} s buffer",
            clock.seconds(oldest - window_end),
            config.buffer.as_secs_f64()
        );
        return Look::Done(keep_missed(link, id, &why, delay_s, (msg, route)));
    }
    let req = TriggerRequest {
        at: Some(At::Ticks(at)),
        pre_s: t.pre_s,
        post_s: t.post_s,
        burst_id: Some(id.clone()),
    };
    // The unit's desk, as for its socket: a trigger it refuses (too long a window, gone from
    // the buffers, no room, a bad id) is missed with the reason; one that a burst in progress
    // stands in the way of is looked at again, on this task.
    let reply = match link.desk.take(&req, Patience::AskAgain) {
        desk::Decision::Accepted(reply)
        | desk::Decision::Joined(reply)
        | desk::Decision::Continued(reply) => reply,
        desk::Decision::Waiting(desk::Waiting::BurstInTheWay(busy)) => {
            return Look::Wait(Holdup::Burst(busy.to_string()))
        }
        // (Not on the fleet's path, whose trigger has a place on the data clock already.)
        desk::Decision::Waiting(desk::Waiting::FirstFrame) => {
            return Look::Wait(Holdup::FirstFrame {
                post: Duration::from_secs_f64(post.clamp(0.0, 86_400.0)),
            })
        }
        desk::Decision::Refused(refused) => {
            let why = format!("refused: {refused}");
            return Look::Done(keep_missed(link, id, &why, delay_s, (msg, route)));
        }
    };
    let mut book = link.book();
    let kept = book.journal.record(
        id,
        Outcome::Recording,
        None,
        delay_s,
        (route, stream_seq(msg)),
        Some(&reply.burst_id),
    );
    if msg.is_none() {
        book.fast_handled.insert(id);
    }
    Look::Done(match kept {
        Ok(()) => Ok(Handling::Recording(Box::new(reply))),
        Err(e) => Err(format!(
            "trigger {id} is recording, but its journal failed: {e}"
        )),
    })
}

/// Whether trigger `id` was handled before (`fast`: this copy came by the fast path): in the
/// journal, or answered by a burst of this run (it joined one, and its journal line was lost) or
/// in the output (a burst whose manifest names it; a file that merely has its name, the unit's
/// socket or journal or another trigger's burst, is no answer to it). Its other path's copy is
/// the design, not a duplicate.
fn handled_before(link: &Link, id: &str, fast: bool) -> Option<Handling> {
    let answered = link.desk.answered_by(id).is_some();
    let output = &link.desk.unit().config().output_dir;
    let recorded = snbuf_burst::names::burst_answering(output, id).is_some();
    let mut book = link.book();
    if book.journal.get(id).is_none() && !recorded && !answered {
        return None;
    }
    if fast || book.fast_handled.remove(id) {
        return Some(Handling::SecondCopy);
    }
    Some(Handling::Duplicate)
}

/// Trigger `id` cannot be recorded by this unit: kept in the journal (Err if it cannot be), to
/// be published as `missed` by `finish` or, if NATS fails meanwhile, at the next beat.
fn keep_missed(
    link: &Link,
    id: &str,
    why: &str,
    delay_s: f64,
    (msg, route): (Option<&jetstream::Message>, Route),
) -> Result<Handling, String> {
    let mut book = link.book();
    let seq = stream_seq(msg);
    book.journal
        .record(
            id,
            Outcome::Missed,
            Some(why.into()),
            delay_s,
            (route, seq),
            None,
        )
        .map_err(|e| format!("trigger {id} was missed, and its journal failed: {e}"))?;
    if msg.is_none() {
        book.fast_handled.insert(id);
    }
    Ok(Handling::Missed(why.into()))
}

/// Says and publishes what became of trigger `t`, once decided; `arrived_s` is how late it was
/// delivered (a `late` event past 2 s).
async fn finish(
    js: &jetstream::Context,
    link: &Link,
    t: &TriggerMessage,
    route: Route,
    outcome: Result<Handling, String>,
    arrived_s: f64,
) -> Result<(), String> {
    let id = &t.trigger_id;
    // A refused id may hold anything: shown escaped, so it cannot forge a log line.
    let shown: String = id.chars().take(80).flat_map(char::escape_debug).collect();
    let say = |line: String| link.say(&format!("NATS trigger {shown}: {line}"));
    match outcome? {
        Handling::SecondCopy => {}
        Handling::Duplicate => {
            say("already handled: duplicate ignored".into());
            let _ = publish_event(js, link, EventKind::Duplicate {}, Some(id), Some(id)).await;
        }
        Handling::Missed(why) => {
            say(format!("missed: {why}"));
            let _ = publish_owed(js, link).await;
        }
        Handling::Recording(reply) => {
            let w = &reply.window;
            let came = match route {
                Route::JetStream => "through JetStream",
                Route::Fast => "by the fast path",
                Route::CatchUp => "from the stream on reconnecting",
                Route::Unknown => "by an unknown way",
            };
            let what = match &reply.joined {
                Some(j) => format!(
                    "joined burst {} (recording [{}, {}) of it, the burst's end moved {:.3} s)",
                    reply.burst_id, j.covered_start, j.covered_end, j.extended_by_s
                ),
                None => format!(
                    "recording window [{}, {}) ticks, {:.3} s before to {:.3} s after {}",
                    w.window_start_timestamp,
                    w.window_end_timestamp,
                    w.pre_s.unwrap_or(0.0),
                    w.post_s.unwrap_or(0.0),
                    w.trigger_timestamp
                ),
            };
            say(format!(
                "{what} (came {came}, {arrived_s:.3} s after it was sent)"
            ));
            if let Some(j) = &reply.joined {
                let joined = EventKind::Joined(JoinedEvent {
                    burst_id: reply.burst_id.clone(),
                    covered_start: j.covered_start,
                    covered_end: j.covered_end,
                    extended_by_s: j.extended_by_s,
                    not_covered_s: j.not_covered_s,
                    not_covered_why: j.not_covered_why.clone(),
                });
                let _ = publish_event(js, link, joined, Some(&reply.burst_id), Some(id)).await;
            }
            if arrived_s > 2.0 {
                let reason = format!("delivered {arrived_s:.1} s after it was issued (this unit was not running or not connected): recording what is left of its window");
                let late = EventKind::Late(EventReason {
                    reason: Some(reason),
                    delay_s: arrived_s,
                });
                let _ = publish_event(js, link, late, Some(id), Some(id)).await;
            }
        }
    }
    Ok(())
}

/// The trigger stream's sequence of a JetStream delivery.
fn stream_seq(msg: Option<&jetstream::Message>) -> Option<u64> {
    msg.and_then(|m| m.info().ok()).map(|i| i.stream_sequence)
}
