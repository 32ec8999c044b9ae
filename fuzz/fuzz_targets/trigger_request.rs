//! A trigger as a hostile sender could write it, over the control socket (a JSON request) or
//! over NATS (the fleet's trigger message), checked the way a unit checks it: parsed, its id
//! judged as a directory name, its window placed on buffers holding what the input's first 24
//! bytes say. It must never panic; an id accepted must be one plain name inside the output, of
//! letters, digits, `.`, `_` and `-` only (no newline to forge a log line or a header); a
//! window accepted must hold its trigger, start no later than it ends, not be wholly gone from
//! the buffers, and not lie more than a buffer's length ahead of the newest frame.
#![no_main]

use std::path::{Component, Path};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use snbuf_frames::DetectorClock;
use snbuf_unit::protocol::{Request, TriggerRequest};
use snbuf_unit::window::{Held, WindowClock};
use snbuf_unit::TriggerAt;

fuzz_target!(|bytes: &[u8]| {
    if bytes.len() < 25 {
        return;
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let (newest, oldest) = (word(0), word(1));
    let step = (word(2) % 100_000).max(1);
    let held = Held {
        newest: Some(newest),
        oldest: Some(oldest.min(newest)),
        oldest_anywhere: Some(oldest.min(newest) / 2),
    };
    let body = &bytes[25..];
    let req = match bytes[24] % 2 {
        // The control socket's request.
        0 => {
            let Ok(v) = serde_json::from_slice(body) else {
                return;
            };
            match Request::parse(&v) {
                Ok(Request::Trigger(t)) => t,
                _ => return,
            }
        }
        // The fleet's trigger message, as a unit turns it into a request.
        _ => {
            let Ok(t) = serde_json::from_slice::<snbuf_fleet::TriggerMessage>(body) else {
                return;
            };
            TriggerRequest {
                at: t.at_ticks.map(snbuf_unit::protocol::At::Ticks),
                pre_s: t.pre_s,
                post_s: t.post_s,
                burst_id: Some(t.trigger_id),
            }
        }
    };
    if let Some(id) = &req.burst_id {
        if snbuf_burst::check_burst_id(id).is_ok() {
            let parts: Vec<_> = Path::new(id).components().collect();
            assert!(
                matches!(parts[..], [Component::Normal(_)]),
                "accepted as a burst id, not one plain name: {id:?}"
            );
            // Nothing that could end a log line or a NATS header, or hide a name.
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                    && !id.starts_with('.')
                    && id.len() <= 128,
                "accepted as a burst id: {id:?}"
            );
        }
    }
    let (Ok(at), Ok(pre), Ok(post)) = (
        req.at(),
        TriggerRequest::seconds(req.pre_s, "pre_s", Duration::from_secs(2)),
        TriggerRequest::seconds(req.post_s, "post_s", Duration::from_secs(3)),
    ) else {
        return;
    };
    let buffer = Duration::from_secs(10);
    let clock = WindowClock {
        frame_step_ticks: step,
        clock: DetectorClock::new(62_500_000),
        buffer,
    };
    if let Ok(w) = clock.window(held, at, pre, post) {
        let t = w.trigger_timestamp;
        assert!(
            w.window_start_timestamp <= t && t <= w.window_end_timestamp,
            "{w:?}"
        );
        assert!(
            w.window_end_timestamp > held.oldest_anywhere.unwrap(),
            "a gone window: {w:?}"
        );
        if let TriggerAt::Timestamp(at) = at {
            assert_eq!(at, t);
            assert!(
                at <= newest.saturating_add(clock.clock.ticks(buffer)),
                "{w:?}"
            );
        }
    }
});
