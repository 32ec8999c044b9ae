//! The control protocol of a running unit, typed: what `snbuf trigger`, `snbuf status`, the live
//! view and the fleet's NATS link send and read, and what the server (`control`) answers. One
//! JSON line each way; these types are the only place its fields are named.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use snbuf_burst::Window;

use crate::counters::LinkCounters;
use crate::link_rates::LinkRate;
use crate::window::TriggerAt;

/// The longest `pre_s` or `post_s` a trigger may ask for: a day.
pub const MAX_WINDOW_S: f64 = 86_400.0;

/// A request to the unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Trigger(TriggerRequest),
    Cancel(CancelRequest),
    Status,
    Shutdown,
}

/// `{"cmd":"cancel","burst_id":ID}`: end the burst being recorded now, sealed with what was
/// written (an operator's decision: what it would have recorded after is not counted lost).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub burst_id: String,
}

/// The answer to a cancel: where the burst now ends, and how much of its window that cuts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelReply {
    pub ok: bool,
    pub burst_id: String,
    pub window_end_timestamp: u64,
    /// Seconds of the detector's clock cut from the window's end.
    pub cut_s: f64,
}

impl Request {
    /// A request as it came over the wire (one JSON value), checked: a known command with its
    /// fields, or why not. What the server answers to anything else.
    pub fn parse(req: &Value) -> Result<Request, String> {
        match req.get("cmd").and_then(Value::as_str) {
            Some("status" | "shutdown" | "trigger" | "cancel") => {}
            Some(other) => {
                return Err(format!(
                    "unknown command '{other}' (known: trigger, cancel, status, shutdown)"
                ))
            }
            None => return Err("the request has no \"cmd\"".into()),
        }
        serde_json::from_value(req.clone()).map_err(|e| format!("a malformed request: {e}"))
    }
}

/// Where a trigger's window is centred, on the wire: `"now"` or a detector timestamp in ticks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum At {
    Ticks(u64),
    Word(String),
}

/// `{"cmd":"trigger", ...}`: record the window around `at` (default now) from `pre_s` before to
/// `post_s` after it (default: the unit's own), as burst `burst_id` (default: the next of the
/// unit's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<At>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_id: Option<String>,
}

impl TriggerRequest {
    /// Where the window is centred.
    pub fn at(&self) -> Result<TriggerAt, String> {
        match &self.at {
            None => Ok(TriggerAt::Now),
            Some(At::Word(w)) if w == "now" => Ok(TriggerAt::Now),
            Some(At::Ticks(t)) => Ok(TriggerAt::Timestamp(*t)),
            Some(At::Word(_)) => Err("\"at\" must be \"now\" or a timestamp in ticks".into()),
        }
    }

    /// `pre_s` or `post_s` checked: a number of seconds from 0 to a day (a huge number is
    /// refused here rather than overflow a Duration), or `default` when absent.
    pub fn seconds(
        value: Option<f64>,
        key: &str,
        default: std::time::Duration,
    ) -> Result<std::time::Duration, String> {
        match value {
            None => Ok(default),
            Some(s) if (0.0..=MAX_WINDOW_S).contains(&s) => {
                Ok(std::time::Duration::from_secs_f64(s))
            }
            Some(_) => Err(format!(
                "\"{key}\" must be a number of seconds from 0 to {MAX_WINDOW_S}"
            )),
        }
    }
}

/// The answer to an accepted trigger: the burst and the window it records, decided when the
/// trigger was accepted (the same `window` goes into the burst's manifest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriggerReply {
    pub ok: bool,
    pub burst_id: String,
    /// The trigger's own window (for a trigger that joined a burst, the one it asked for).
    pub window: Window,
    /// The window's length in seconds of the detector's clock.
    pub window_s: f64,
    /// Set when the trigger joined the burst already being recorded (`burst_id`) instead of
    /// starting one: what of its window that burst records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<Joined>,
    /// Set when the outputs have no room for the whole window: what is recorded of it, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// A trigger whose window began inside the burst being recorded: that burst answers it, its end
/// moved out when the trigger's window reached further.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Joined {
    /// The part of the trigger's window the burst records, [start, end) in ticks.
    pub covered_start: u64,
    pub covered_end: u64,
    /// How far the burst's end moved for it (s of the detector's clock; 0 when it already
    /// reached that far).
    pub extended_by_s: f64,
    /// What of the trigger's window the burst cannot record (s), and why: only when the output
    /// has no room for the whole extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_covered_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_covered_why: Option<String>,
    /// The burst reached --max-burst: the rest of the trigger's window (from `covered_end`, or
    /// all of it when `covered_end` is its start) is recorded as this next burst, with no gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_in: Option<String>,
    /// The trigger's window begins before this burst, in the burst it continues (named here):
    /// the part before `covered_start` is recorded there (and in the bursts before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begins_in: Option<String>,
}

/// A refusal, of any request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub ok: bool,
    pub error: String,
}

impl Refusal {
    pub fn new(error: impl Into<String>) -> Refusal {
        Refusal {
            ok: false,
            error: error.into(),
        }
    }

    pub fn json(error: impl Into<String>) -> Value {
        serde_json::to_value(Refusal::new(error)).expect("a refusal serialises")
    }
}

/// How a trigger's burst ended: as its manifest says (`sealed`, `failed`, `recovered`), or
/// `error` when nothing could be recorded (the outcome's `error` says why).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeState {
    Sealed,
    Failed,
    Recovered,
    #[default]
    Error,
    /// A state a newer unit reports that this version does not know: read, and shown as
    /// unknown, rather than the whole status or heartbeat refused.
    #[serde(other)]
    Unknown,
}

impl OutcomeState {
    /// The state as the wire, the metrics and the fleet's events write it.
    pub fn name(self) -> &'static str {
        match self {
            OutcomeState::Sealed => "sealed",
            OutcomeState::Failed => "failed",
            OutcomeState::Recovered => "recovered",
            OutcomeState::Error => "error",
            OutcomeState::Unknown => "unknown",
        }
    }

    /// The outcome of a burst whose manifest was left in `state` when its recording (or its
    /// recovery) ended: one still `recording` then was not finished, an error.
    pub fn of(state: snbuf_burst::BurstState) -> OutcomeState {
        match state {
            snbuf_burst::BurstState::Sealed => OutcomeState::Sealed,
            snbuf_burst::BurstState::Failed => OutcomeState::Failed,
            snbuf_burst::BurstState::Recovered => OutcomeState::Recovered,
            snbuf_burst::BurstState::Recording => OutcomeState::Error,
        }
    }
}

impl std::fmt::Display for OutcomeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What became of one trigger's burst.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BurstOutcome {
    pub burst_id: String,
    pub state: OutcomeState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<std::path::PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_frames: Option<u64>,
    /// The lost frames in seconds of the detector's clock, per link at most (the link that
    /// lost most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_s: Option<f64>,
    #[serde(default)]
    pub valid: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_ahead: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_cut_to_bytes_per_link: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every trigger the burst answers (its manifest's `triggers`): the one that opened it, and
    /// those that joined it. So the fleet's `sealed` event names each of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<String>,
}

impl BurstOutcome {
    /// Sealed and verified.
    pub fn clean(&self) -> bool {
        self.state == OutcomeState::Sealed && self.valid
    }
}

/// One link's figures: the same fields in the status file and in `snbuf status`. They are the
/// unit's own counters as they are (`LinkCounters`), with `frames_out`, an older name of
/// `durable_frames` that readers of the status file still read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkStatus {
    #[serde(flatten)]
    pub counters: LinkCounters,
    pub frames_out: u64,
}

impl From<&LinkCounters> for LinkStatus {
    fn from(l: &LinkCounters) -> LinkStatus {
        LinkStatus {
            counters: *l,
            frames_out: l.durable_frames,
        }
    }
}

/// How the unit receives from the network.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IngestStatus {
    pub routing: String,
    /// Whether the sockets receive coalesced buffers (UDP GRO), and why not where the kernel
    /// refused it.
    #[serde(default)]
    pub gro: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gro_refused: Option<String>,
    pub rcvbuf_bytes: usize,
    pub rmem_max_bytes: Option<u64>,
    /// The longest nap between the receiver's poll rounds (`--receive-nap`), s.
    #[serde(default)]
    pub nap_s: f64,
    /// The CPU the receive thread runs on, and the interface holding the bound address with
    /// its NUMA node ("eth0 (NUMA node 1)"; none for 0.0.0.0).
    #[serde(default)]
    pub receive_cpu: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<String>,
    pub links: Vec<Option<snbuf_readout::udp::IngestSnapshot>>,
}

/// The burst being recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordingBurst {
    pub burst_id: String,
    pub window: Window,
}

/// `{"cmd":"status"}`'s answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UnitStatus {
    pub ok: bool,
    pub uptime_s: f64,
    pub ingest: Option<IngestStatus>,
    pub links: u32,
    pub frame_type: String,
    /// The detector's clock (a second of every window is this many ticks), and the ticks
    /// between a link's frames (the frame type's own, or a sub-sampled link's step).
    pub clock_hz: u64,
    pub frame_step_ticks: u64,
    /// The rate each link was configured for (bytes/s), and the seconds its buffer was sized
    /// to hold at that rate. What each link brings and holds is in `link_rates`.
    pub rate_bytes_per_s_per_link: f64,
    pub buffer_s: f64,
    pub buffer_memory_bytes: u64,
    pub buffer_capacity_frames: u64,
    pub method: String,
    pub newest_timestamp: Option<u64>,
    /// Per link, while a burst records.
    pub recording: Option<Vec<LinkStatus>>,
    pub live: Vec<LinkStatus>,
    /// Per link, over the unit's run: the detector timestamp of the newest frame any burst made
    /// durable (`live` holds only the burst being recorded).
    #[serde(default)]
    pub durable_watermark: Vec<Option<u64>>,
    /// Per link, its data clock and rate as measured, and its buffer's span in detector seconds.
    #[serde(default)]
    pub link_rates: Vec<LinkRate>,
    pub recording_burst: Option<RecordingBurst>,
    /// Bursts whose writers are done, being sealed and read back while the unit takes the next
    /// trigger.
    #[serde(default)]
    pub sealing_bursts: Vec<String>,
    pub next_burst: String,
    pub bursts_total: u64,
    pub bursts: Vec<BurstOutcome>,
}

impl UnitStatus {
    /// The unit in a line: links, frame type, rate, buffer, method and clock.
    pub fn summary(&self) -> String {
        format!(
            "{} links of {} at {} each, buffer {:.1} s, method {}, detector clock {} MHz",
            self.links,
            self.frame_type,
            snbuf_quantity::Rate(self.rate_bytes_per_s_per_link),
            self.buffer_s,
            self.method,
            self.clock_hz as f64 / 1e6
        )
    }

    /// The frame size, from the buffer's figures.
    pub fn frame_bytes(&self) -> f64 {
        self.buffer_memory_bytes as f64
            / (self.links.max(1) as f64 * self.buffer_capacity_frames.max(1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_clients_write_them() {
        let r: Request = serde_json::from_str(r#"{"cmd":"trigger","at":"now","pre_s":2}"#).unwrap();
        let Request::Trigger(t) = r else {
            panic!("a trigger")
        };
        assert_eq!(t.at(), Ok(TriggerAt::Now));
        assert_eq!(t.pre_s, Some(2.0));
        let r: Request = serde_json::from_str(r#"{"cmd":"trigger","at":123}"#).unwrap();
        assert!(matches!(r, Request::Trigger(ref t) if t.at() == Ok(TriggerAt::Timestamp(123))));
        let r: Request = serde_json::from_str(r#"{"cmd":"trigger","at":"later"}"#).unwrap();
        assert!(matches!(r, Request::Trigger(ref t) if t.at().is_err()));
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"cmd":"status"}"#).unwrap(),
            Request::Status
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"trigger","pre_s":"1"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"trigger","prе_s":1}"#).is_err());
        // What a client sends is what the server reads.
        let t = TriggerRequest {
            at: Some(At::Ticks(7)),
            post_s: Some(1.5),
            ..TriggerRequest::default()
        };
        let back: Request =
            serde_json::from_value(serde_json::to_value(Request::Trigger(t.clone())).unwrap())
                .unwrap();
        assert_eq!(back, Request::Trigger(t));
        assert!(TriggerRequest::seconds(Some(-1.0), "pre_s", Default::default()).is_err());
        assert!(TriggerRequest::seconds(Some(1e300), "pre_s", Default::default()).is_err());
    }
}
