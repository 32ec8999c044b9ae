//! The operator's side of the control plane: `snbuf trigger --nats` and `snbuf fleet status`.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;

use crate::schema::*;
use crate::unit_link::{ensure_layout, NatsOptions};
use snbuf_units::now_unix_ns;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("NATS at {url}: {why}")]
    Nats { url: String, why: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// An error of the NATS server at `opts.url`, saying `why`.
pub(crate) fn nats_error(opts: &NatsOptions) -> impl Fn(String) -> FleetError + '_ {
    |why| FleetError::Nats {
        url: opts.url.clone(),
        why,
    }
}

pub(crate) async fn connect(opts: &NatsOptions) -> Result<jetstream::Context, FleetError> {
    let o = opts.connect_options().await?;
    let client = async_nats::connect_with_options(&opts.url, o)
        .await
        .map_err(|e| {
            nats_error(opts)(format!(
                "cannot connect ({e}); is nats-server running with -js?"
            ))
        })?;
    Ok(jetstream::new(client))
}

/// Connected, with the fleet's streams in place (created if this is the first to connect).
async fn open(opts: &NatsOptions) -> Result<jetstream::Context, FleetError> {
    let js = connect(opts).await?;
    ensure_layout(&js).await.map_err(nats_error(opts))?;
    Ok(js)
}

/// Broadcasts `t` to every unit; returns once JetStream has stored it.
pub fn broadcast_trigger(opts: &NatsOptions, t: &TriggerMessage) -> Result<(), FleetError> {
    runtime()?.block_on(async {
        let js = open(opts).await?;
        let nats = nats_error(opts);
        js.publish(
            TRIGGER_SUBJECT,
            serde_json::to_vec(t).expect("serialises").into(),
        )
        .await
        .map_err(|e| nats(format!("publish trigger: {e}")))?
        .await
        .map_err(|e| nats(format!("trigger not stored: {e}")))?;
        Ok(())
    })
}

/// A unit as `fleet status` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UnitView {
    pub status: UnitStatus,
    /// Seconds since its last heartbeat.
    pub silent_s: f64,
    /// No heartbeat for `MISSING_AFTER_MS`: stopped, crashed or cut off.
    pub missing: bool,
}

/// Every unit that ever reported, with its latest status, sorted by id.
pub fn fleet_status(opts: &NatsOptions) -> Result<Vec<UnitView>, FleetError> {
    runtime()?.block_on(async {
        let js = open(opts).await?;
        let nats = nats_error(opts);
        let mut out = Vec::new();
        let now = now_unix_ns();
        for msg in last_per_subject(&js, STATUS_STREAM, STATUS_SUBJECTS)
            .await
            .map_err(nats)?
        {
            // A status another version wrote, or garbage: skipped.
            let Ok(status) = serde_json::from_slice::<UnitStatus>(&msg) else {
                continue;
            };
            let silent_s = now.saturating_sub(status.sent_unix_ns) as f64 / 1e9;
            out.push(UnitView {
                missing: silent_s * 1000.0 > MISSING_AFTER_MS as f64,
                silent_s,
                status,
            });
        }
        out.sort_by(|a, b| a.status.unit.cmp(&b.status.unit));
        Ok(out)
    })
}

/// The longest a read of the fleet's state may take, whatever the fleet publishes meanwhile.
pub const READ_DEADLINE: Duration = Duration::from_secs(8);
/// How many last-message requests one status read keeps in flight.
const GETS_IN_FLIGHT: usize = 32;

/// The last message of every subject of `stream` that matches `filter`: the subjects the stream
/// held when the call began (its info, paged), then each one's last message by request, up to
/// `GETS_IN_FLIGHT` at a time, all within `READ_DEADLINE`. A unit that publishes meanwhile is read
/// with its newer message; a subject gone meanwhile (expired) is left out. Each subject comes
/// once, however fast units publish. Two earlier readers dropped units under load: stopping at
/// the stream's last sequence read beforehand (143 of 150), and an ordered consumer delivering
/// the last message per subject (1 of 150): with one message kept per subject, a heartbeat
/// replaced before its delivery comes again later in stream order, behind other units' newer
/// ones, so no message tells where the stream's state at the start ends.
async fn last_per_subject(
    js: &jetstream::Context,
    stream: &str,
    filter: &str,
) -> Result<Vec<bytes::Bytes>, String> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    use futures::TryStreamExt;
    let read = async {
        let s = js
            .get_stream(stream)
            .await
            .map_err(|e| format!("stream {stream}: {e}"))?;
        let subjects: Vec<String> = s
            .info_with_subjects(filter)
            .await
            .map_err(|e| format!("subjects of {stream}: {e}"))?
            .map_ok(|(subject, _count)| subject)
            .try_collect()
            .await
            .map_err(|e| format!("subjects of {stream}: {e}"))?;
        let s = &s;
        futures::stream::iter(subjects)
            .map(|subject| async move {
                match s.get_last_raw_message_by_subject(&subject).await {
                    Ok(m) => Ok(Some(m.payload)),
                    Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
                    Err(e) => Err(format!("read {subject} from {stream}: {e}")),
                }
            })
            .buffer_unordered(GETS_IN_FLIGHT)
            .try_filter_map(|m| async move { Ok(m) })
            .try_collect()
            .await
    };
    tokio::time::timeout(READ_DEADLINE, read)
        .await
        .map_err(|_| {
            format!(
                "read {stream}: not done after {} s",
                READ_DEADLINE.as_secs()
            )
        })?
}

/// The events units published before the call, oldest first (at most `max`), waiting at most
/// `wait` for each next one. However fast units publish meanwhile, it stops at the stream's last
/// message when the call began, and within `READ_DEADLINE`.
pub fn recent_events(
    opts: &NatsOptions,
    max: usize,
    wait: Duration,
) -> Result<Vec<UnitEvent>, FleetError> {
    runtime()?.block_on(async {
        let js = open(opts).await?;
        let nats = nats_error(opts);
        let deadline = tokio::time::Instant::now() + READ_DEADLINE;
        let mut stream = js
            .get_stream(EVENT_STREAM)
            .await
            .map_err(|e| nats(format!("stream {EVENT_STREAM}: {e}")))?;
        let state = stream
            .info()
            .await
            .map_err(|e| nats(format!("stream {EVENT_STREAM}: {e}")))?
            .state
            .clone();
        if state.messages == 0 {
            return Ok(Vec::new());
        }
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
            .await
            .map_err(|e| nats(format!("read events: {e}")))?;
        let mut msgs = consumer
            .messages()
            .await
            .map_err(|e| nats(format!("read events: {e}")))?;
        let mut out = Vec::new();
        while out.len() < max {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match tokio::time::timeout(wait.min(left), msgs.next()).await {
                Ok(Some(Ok(m))) => {
                    if let Ok(e) = serde_json::from_slice::<UnitEvent>(&m.payload) {
                        out.push(e);
                    }
                    if m.info()
                        .map_or(true, |i| i.stream_sequence >= state.last_sequence)
                    {
                        break;
                    }
                }
                _ => break,
            }
        }
        Ok(out)
    })
}
