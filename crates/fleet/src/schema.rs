//! The subjects, streams and messages of the fleet's control plane (docs/FLEET.md). Every
//! message is one JSON object; fields are added, never repurposed (`schema` counts changes).

use serde::{Deserialize, Serialize};
use snbuf_unit::protocol::{BurstOutcome, OutcomeState, UnitStatus};

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

/// Something that happened to a unit's burst or trigger. On the wire: `event` (its kind's name)
/// and `detail` (what it says), beside the unit, the time and the ids.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(into = "WireEvent", try_from = "WireEvent")]
pub struct UnitEvent {
    pub schema: u32,
    pub unit: String,
    pub sent_unix_ns: u64,
    pub burst_id: Option<String>,
    pub trigger_id: Option<String>,
    pub kind: EventKind,
    /// The `detail` as it came, for an event read from the wire: written out again as it came
    /// (fields a newer unit adds kept, none made up), whatever of it `kind` understood.
    pub received_detail: Option<serde_json::Value>,
}

impl UnitEvent {
    /// The event in one line for a person (`snbuf fleet events`): the unit, the kind, the burst
    /// or trigger, and what it says.
    pub fn line(&self) -> String {
        let said = match &self.kind {
            EventKind::Missed(r) | EventKind::Late(r) => r.reason.clone().unwrap_or_default(),
            EventKind::Sealed(o)
            | EventKind::Failed(o)
            | EventKind::Recovered(o)
            | EventKind::Error(o) => match (&o.error, o.frames) {
                (Some(why), _) => why.clone(),
                (None, Some(frames)) => format!("{frames} frames"),
                (None, None) => String::new(),
            },
            EventKind::Joined(j) => format!("joined {}", j.burst_id),
            EventKind::Exported {} | EventKind::Duplicate {} | EventKind::Other { .. } => {
                String::new()
            }
        };
        let about = self.burst_id.as_deref().or(self.trigger_id.as_deref());
        format!(
            "{} {:<9} {} {said}",
            self.unit,
            self.kind.name(),
            about.unwrap_or("-")
        )
    }
}

/// What a `UnitEvent` is, with its `detail`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "event", content = "detail", rename_all = "snake_case")]
pub enum EventKind {
    /// A burst finished, by its final state: its outcome as the unit's status reports it.
    Sealed(BurstOutcome),
    Failed(BurstOutcome),
    Recovered(BurstOutcome),
    Error(BurstOutcome),
    /// A burst was sent to the export's destination and read back there.
    Exported {},
    /// A trigger this unit cannot record (its window had left the buffer, or it was refused).
    Missed(EventReason),
    /// A trigger delivered late: what was left of its window is recorded.
    Late(EventReason),
    /// A trigger that joined the burst being recorded.
    Joined(JoinedEvent),
    /// A trigger already handled, delivered again: ignored.
    Duplicate {},
    /// A kind this snbuf does not know (a newer unit's), or a known one whose detail it cannot
    /// read: kept as it came, not understood.
    #[serde(skip)]
    Other {
        event: String,
        detail: serde_json::Value,
    },
}

/// The kinds this snbuf knows, by their names on the wire.
const KNOWN_EVENTS: [&str; 9] = [
    "sealed",
    "failed",
    "recovered",
    "error",
    "exported",
    "missed",
    "late",
    "joined",
    "duplicate",
];

/// A `UnitEvent` as it goes over the wire: its kind as a name and a detail, so that a kind a
/// newer unit sends is read (as `EventKind::Other`) rather than refused.
#[derive(Serialize, Deserialize)]
struct WireEvent {
    schema: u32,
    unit: String,
    sent_unix_ns: u64,
    event: String,
    burst_id: Option<String>,
    trigger_id: Option<String>,
    #[serde(default)]
    detail: serde_json::Value,
}

impl From<UnitEvent> for WireEvent {
    fn from(e: UnitEvent) -> WireEvent {
        let (event, detail) = match (e.kind, e.received_detail) {
            (EventKind::Other { event, detail }, _) => (event, detail),
            (kind, Some(detail)) => (kind.name().to_string(), detail),
            (kind, None) => {
                let event = kind.name().to_string();
                let mut v = serde_json::to_value(kind).expect("events serialise");
                (event, v["detail"].take())
            }
        };
        WireEvent {
            schema: e.schema,
            unit: e.unit,
            sent_unix_ns: e.sent_unix_ns,
            event,
            burst_id: e.burst_id,
            trigger_id: e.trigger_id,
            detail,
        }
    }
}

impl TryFrom<WireEvent> for UnitEvent {
    type Error = serde_json::Error;

    fn try_from(w: WireEvent) -> Result<UnitEvent, serde_json::Error> {
        // A known kind whose detail does not read (an older or a loose sender's) is kept as
        // it came, as an unknown one is: an event is never dropped for its detail.
        let typed = KNOWN_EVENTS
            .contains(&w.event.as_str())
            .then(|| {
                let both = serde_json::json!({"event": w.event, "detail": w.detail});
                serde_json::from_value::<EventKind>(both).ok()
            })
            .flatten();
        let received_detail = typed.is_some().then(|| w.detail.clone());
        let kind = typed.unwrap_or(EventKind::Other {
            event: w.event,
            detail: w.detail,
        });
        Ok(UnitEvent {
            schema: w.schema,
            unit: w.unit,
            sent_unix_ns: w.sent_unix_ns,
            burst_id: w.burst_id,
            trigger_id: w.trigger_id,
            kind,
            received_detail,
        })
    }
}

impl EventKind {
    /// A finished burst's event, by the state it ended in.
    pub fn of_burst(outcome: BurstOutcome) -> EventKind {
        match outcome.state {
            OutcomeState::Sealed => EventKind::Sealed(outcome),
            OutcomeState::Failed => EventKind::Failed(outcome),
            OutcomeState::Recovered => EventKind::Recovered(outcome),
            OutcomeState::Error => EventKind::Error(outcome),
            // Only read from a newer unit, never a unit's own: said as what it cannot be told
            // apart from.
            OutcomeState::Unknown => EventKind::Error(outcome),
        }
    }

    /// The name on the wire (`event`).
    pub fn name(&self) -> &str {
        match self {
            EventKind::Sealed(_) => "sealed",
            EventKind::Failed(_) => "failed",
            EventKind::Recovered(_) => "recovered",
            EventKind::Error(_) => "error",
            EventKind::Exported {} => "exported",
            EventKind::Missed(_) => "missed",
            EventKind::Late(_) => "late",
            EventKind::Joined(_) => "joined",
            EventKind::Duplicate {} => "duplicate",
            EventKind::Other { event, .. } => event,
        }
    }
}

/// Why a trigger was missed, or late: in words, and how long after its issue it was handled.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventReason {
    pub reason: Option<String>,
    pub delay_s: f64,
}

/// What of a trigger's window the burst it joined records (`snbuf_unit::protocol::Joined`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JoinedEvent {
    pub burst_id: String,
    pub covered_start: u64,
    pub covered_end: u64,
    pub extended_by_s: f64,
    pub not_covered_s: Option<f64>,
    pub not_covered_why: Option<String>,
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

    #[test]
    fn events_read_and_write_the_wire_they_always_had() {
        use serde_json::json;
        let wire = |event: &str, detail: serde_json::Value| {
            json!({"schema": 1, "unit": "u1", "sent_unix_ns": 7, "event": event,
                   "burst_id": "b", "trigger_id": "t", "detail": detail})
        };
        let outcome = BurstOutcome {
            burst_id: "b".into(),
            state: OutcomeState::Sealed,
            frames: Some(12),
            ..BurstOutcome::default()
        };
        let cases = [
            (
                wire("missed", json!({"reason": "gone", "delay_s": 1.5})),
                EventKind::Missed(EventReason {
                    reason: Some("gone".into()),
                    delay_s: 1.5,
                }),
            ),
            (wire("duplicate", json!({})), EventKind::Duplicate {}),
            (wire("exported", json!({})), EventKind::Exported {}),
            (
                wire(
                    "joined",
                    json!({"burst_id": "b", "covered_start": 1, "covered_end": 9,
                "extended_by_s": 0.5, "not_covered_s": null, "not_covered_why": null}),
                ),
                EventKind::Joined(JoinedEvent {
                    burst_id: "b".into(),
                    covered_start: 1,
                    covered_end: 9,
                    extended_by_s: 0.5,
                    not_covered_s: None,
                    not_covered_why: None,
                }),
            ),
            (
                wire("sealed", serde_json::to_value(&outcome).unwrap()),
                EventKind::Sealed(outcome),
            ),
        ];
        for (json, kind) in cases {
            let typed: UnitEvent = serde_json::from_value(json.clone()).unwrap();
            assert_eq!(typed.kind, kind, "{json}");
            assert_eq!(typed.kind.name(), json["event"], "{json}");
            assert_eq!(
                serde_json::to_value(&typed).unwrap(),
                json,
                "written as it was read"
            );
            // And as a unit publishes it, from its kind alone: the wire it always had.
            let published = UnitEvent {
                received_detail: None,
                ..typed
            };
            assert_eq!(serde_json::to_value(&published).unwrap(), json, "published");
        }
        // A newer unit's added field, and a loose sender's detail: kept as they came, the one
        // read typed, the other as Other; nothing made up.
        let added = wire(
            "missed",
            json!({"reason": "gone", "delay_s": 1.5, "added": 42}),
        );
        let read: UnitEvent = serde_json::from_value(added.clone()).unwrap();
        assert!(matches!(read.kind, EventKind::Missed(_)));
        assert_eq!(serde_json::to_value(&read).unwrap(), added);
        let loose = wire("exported", serde_json::Value::Null);
        let read: UnitEvent = serde_json::from_value(loose.clone()).unwrap();
        assert!(matches!(read.kind, EventKind::Other { .. }), "{read:?}");
        assert_eq!(serde_json::to_value(&read).unwrap(), loose);
        // A kind a newer unit publishes: read, kept as it came, not dropped.
        let json = wire("paused", json!({"why": 1}));
        let newer: UnitEvent = serde_json::from_value(json.clone()).unwrap();
        let other = EventKind::Other {
            event: "paused".into(),
            detail: json!({"why": 1}),
        };
        assert_eq!(newer.kind, other);
        assert_eq!(serde_json::to_value(&newer).unwrap(), json);
    }
}
