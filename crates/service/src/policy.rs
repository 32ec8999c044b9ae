//! The service's policy: how long it waits for what, and how it names and ships bursts. Each a
//! named figure with its reason, so that none hides in the wiring.

use std::time::Duration;

use snbuf_unit::RecordConfig;

/// What a burst's longest window takes beyond the window itself to persist, seal and verify.
pub const SEAL_ALLOWANCE: Duration = Duration::from_secs(30);

/// The longest a drain may take before the unit gives up on it (`--drain-timeout`'s default):
/// the longest a burst can take (grown by joins to --max-burst), the continuation it may leave
/// (a window past it, placed up to a buffer ahead: no trigger joins once the unit stops), a
/// buffer's worth of waiting for a silent link for each, and `SEAL_ALLOWANCE`. A drain that
/// takes longer is stuck.
pub fn default_drain_timeout(config: &RecordConfig) -> Duration {
    config.max_burst.max(config.pre + config.post)
        + config.max_window
        + 3 * config.buffer
        + SEAL_ALLOWANCE
}

/// How long past filling its buffers a unit may take to say READY to systemd: the buffer must
/// hold a trigger's `pre` first, and the next burst's files must be prepared (a minute is
/// ample on any medium; past it the unit says READY anyway, with why).
pub const READY_ALLOWANCE: Duration = Duration::from_secs(60);

/// When systemd is told READY at the latest (see `READY_ALLOWANCE`).
pub fn ready_deadline(config: &RecordConfig) -> Duration {
    config.buffer + READY_ALLOWANCE
}

/// The size of each part of a multipart upload when the service exports: large enough that a
/// 100 s window of ~1 GB/s is well under S3's 10,000 parts, small enough to resume cheaply.
pub const EXPORT_PART_BYTES: u64 = 16 << 20;

/// How the service names bursts when `--burst-id` is not given: `burst-` before the unit's
/// start stamp, then the server's count (`burst-20261121T231000Z-1234-0001`), so that a
/// directory listing says which bursts a service recorded.
pub const BURST_ID_PREFIX: &str = "burst-";

/// The prefix of the service's burst names: the one given, or `BURST_ID_PREFIX` before the
/// default (`default_id`, the start stamp).
pub fn burst_prefix(given: Option<&str>, default_id: &str) -> String {
    match given {
        Some(id) => id.to_string(),
        None => format!("{BURST_ID_PREFIX}{default_id}"),
    }
}

/// A unit and its object store may lose power together, and a store acknowledges an object
/// before it is sure to survive that. So exports verified this recently when a unit starts are
/// read back again (any object missing is sent again), and with --delete-after-verify a local
/// copy is deleted only at a second read-back this long after the first.
pub const SECOND_READ_BACK_AFTER: Duration = Duration::from_secs(600);

/// How often the exporter looks for bursts the server finished.
pub const EXPORT_FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// How often the signal thread looks at the flags a signal set, and at a drain's progress.
pub const SIGNAL_POLL: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_burst_id_is_kept_and_a_default_is_marked_as_the_services() {
        assert_eq!(burst_prefix(Some("run42"), "x"), "run42");
        assert_eq!(
            burst_prefix(None, "20261121T231000Z-7"),
            "burst-20261121T231000Z-7"
        );
    }
}
