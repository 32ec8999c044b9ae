//! The subjects, streams and messages of the fleet's control plane (docs/FLEET.md). Every
//! message is one JSON object; fields are added, never repurposed (`schema` counts changes).

use serde::{Deserialize, Serialize};
use snbuf_unit::protocol::{OutcomeState, UnitStatus};

/// Version of the message schema.
pub const SCHEMA: u32 = 1;

/// Triggers, broadcast to every unit. Kept in JetStream (stream `SNBUF_TRIGGERS`): a unit that
/// was down or disconnected receives what it missed when it returns, and says so.
pub const TRIGGER_SUBJECT: &str = "snbuf.trigger";
pub const TRIGGER_STREAM: &str = "SNBUF_TRIGGERS";
/// The same trigger, also published on plain NATS: it reaches every connected unit at once,
/// through whichever servers are up, while JetStream may be electing a leader for the trigger
/// stream or a unit's consumer (seconds to tens of seconds when a server is paused). JetStream's
/// copy stays the one that counts: it reaches units that were away. A unit handles whichever
/// copy comes first and finds the other in its journal.
pub const TRIGGER_FAST_SUBJECT: &str = "snbuf.trigger.now";

/// Burst events of unit ID: `snbuf.unit.ID.event`. Kept in JetStream (stream `SNBUF_EVENTS`):
/// the record of what each unit sealed, failed or missed must not be lost.
pub const EVENT_STREAM: &str = "SNBUF_EVENTS";
pub const EVENT_SUBJECTS: &str = "snbuf.unit.*.event";
pub fn event_subject(unit: &str) -> String {
    format!("snbuf.unit.{unit}.event")
}

/// Each unit's heartbeat, on `snbuf.unit.ID.status`, kept in JetStream (stream `SNBUF_UNITS`,
/// one message per subject: the latest): `fleet status` reads every unit's latest status from
/// it, including units that stopped reporting. (A stream rather than a key-value bucket, so that
/// servers from 2.9 on work.)
pub const STATUS_STREAM: &str = "SNBUF_UNITS";
pub const STATUS_SUBJECTS: &str = "snbuf.unit.*.status";
pub fn status_subject(unit: &str) -> String {
    format!("snbuf.unit.{unit}.status")
}

/// How often a unit reports, and after how long without a report it counts as missing.
pub const HEARTBEAT_MS: u64 = 1000;
pub const MISSING_AFTER_MS: u64 = 3 * HEARTBEAT_MS;

/// A trigger for every unit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TriggerMessage {
    pub schema: u32,
    /// Unique per trigger; each unit names its burst after it, so a second delivery of the same
    /// trigger finds its burst and records nothing more.
    pub trigger_id: String,
    /// The centre of the window as wall-clock time (ns since the Unix epoch): every unit turns it
    /// into its own detector ticks, so all record the same window.
    pub at_unix_ns: Option<u64>,
    /// Or the centre in detector ticks, taken as they are.
    pub at_ticks: Option<u64>,
    pub pre_s: Option<f64>,
    pub post_s: Option<f64>,
    /// When the trigger was sent: a unit that receives it much later knows it was away.
    pub issued_unix_ns: u64,
}

/// Whether a unit is recording a burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitState {
    Idle,
    Recording,
    /// A state a newer unit reports that this version does not know: shown as unknown, rather
    /// than the unit's heartbeat skipped.
    #[serde(other)]
    Unknown,
}

impl std::fmt::Display for UnitState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UnitState::Idle => "idle",
            UnitState::Recording => "recording",
            UnitState::Unknown => "unknown",
        })
    }
}

/// What a unit reports every heartbeat: a projection of its own status (`Heartbeat::of`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Heartbeat {
    pub schema: u32,
    pub unit: String,
    pub sent_unix_ns: u64,
    pub state: UnitState,
    pub uptime_s: f64,
    pub links: u32,
    /// The fullest link's latency buffer, 0..1.
    pub buffer_fill: f64,
    /// Per link: timestamp (ticks) of the newest durable frame, if any burst made one durable.
    pub durable_watermark: Vec<Option<u64>>,
    pub bursts_total: u64,
    pub last_burst: Option<BurstSummary>,
    /// Triggers that arrived when their window had already left this unit's buffer.
    pub missed_triggers: u64,
    /// The exporter (`serve --export-to`): exported_total, failed_attempts_total, bytes_total,
    /// queued, lag_s. Null without one.
    #[serde(default)]
    pub export: Option<snbuf_export::queue::ExportProgress>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BurstSummary {
    pub burst_id: String,
    pub state: OutcomeState,
    pub frames: Option<u64>,
    pub lost_frames: Option<u64>,
}

impl Heartbeat {
    /// Unit `unit`'s heartbeat: its status (`snbuf status`'s) seen from the fleet, with the
    /// triggers it missed and its exporter's progress, which only the fleet link knows.
    pub fn of(
        unit: &str,
        status: &UnitStatus,
        missed_triggers: u64,
        export: Option<snbuf_export::queue::ExportProgress>,
    ) -> Heartbeat {
        let capacity = status.buffer_capacity_frames.max(1) as f64;
        let heartbeat = Heartbeat {
            schema: SCHEMA,
            unit: unit.to_string(),
            sent_unix_ns: snbuf_quantity::now_unix_ns(),
            state: match status.recording_burst {
                Some(_) => UnitState::Recording,
                None => UnitState::Idle,
            },
            uptime_s: status.uptime_s,
            links: status.links,
            buffer_fill: status
                .live
                .iter()
                .map(|l| l.counters.buffer_fill_frames as f64 / capacity)
                .fold(0.0, f64::max),
            durable_watermark: status.durable_watermark.clone(),
            bursts_total: status.bursts_total,
            last_burst: status.bursts.last().map(|b| BurstSummary {
                burst_id: b.burst_id.clone(),
                state: b.state,
                frames: b.frames,
                lost_frames: b.lost_frames,
            }),
            missed_triggers,
            export,
        };
        debug_assert_eq!(
            heartbeat.durable_watermark.len(),
            status.links as usize,
            "one per link"
        );
        heartbeat
    }
}

/// Something that happened to a unit's burst or trigger.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UnitEvent {
    pub schema: u32,
    pub unit: String,
    pub sent_unix_ns: u64,
    /// `sealed`, `failed`, `error` (a burst), `exported` (sent and verified), `missed` (its window
    /// had left the buffer),
    /// `late` (recorded what was left of a trigger delivered late), `refused` (e.g. a burst was
    /// being recorded), `duplicate` (a trigger already handled).
    pub event: String,
    pub burst_id: Option<String>,
    pub trigger_id: Option<String>,
    /// The burst's outcome as the unit's status reports it, or why the event happened.
    pub detail: serde_json::Value,
}

/// Unit ids become subject tokens and key names: letters, digits, `-` and `_` only.
pub fn check_unit_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "unit id '{id}': use 1 to 64 letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

/// A unit id made from a host name: what a unit id cannot hold becomes '-' ("daq.fnal.gov" is
/// "daq-fnal-gov"; a machine without a name, "(none)", is "none"); "unit" when nothing is left.
pub fn unit_id_from_hostname(hostname: &str) -> String {
    let id: String = hostname
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches('-');
    let id = &id[..id.len().min(64)];
    if id.is_empty() {
        "unit".into()
    } else {
        id.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_host_name_gives_a_valid_unit_id() {
        for (host, id) in [
            ("daq.fnal.gov", "daq-fnal-gov"),
            ("(none)", "none"),
            ("", "unit"),
            ("...", "unit"),
            ("apa_07\n", "apa_07"),
        ] {
            assert_eq!(unit_id_from_hostname(host), id);
            assert!(check_unit_id(id).is_ok());
        }
        assert!(check_unit_id(&unit_id_from_hostname(&"h".repeat(100))).is_ok());
    }

    #[test]
    fn unit_ids_are_subject_tokens() {
        for ok in ["unit-1", "apa_07", "X"] {
            assert!(check_unit_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a.b", "a b", "a*", "a>", "../x", &"x".repeat(65)] {
            assert!(check_unit_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_trigger_round_trips_and_garbage_is_an_error() {
        let t = TriggerMessage {
            schema: SCHEMA,
            trigger_id: "t1".into(),
            at_unix_ns: Some(5),
            at_ticks: None,
            pre_s: Some(1.0),
            post_s: None,
            issued_unix_ns: 9,
        };
        let back: TriggerMessage =
            serde_json::from_slice(&serde_json::to_vec(&t).unwrap()).unwrap();
        assert_eq!(back, t);
        assert!(serde_json::from_slice::<TriggerMessage>(b"{\"trigger_id\": 3}").is_err());
    }
}
