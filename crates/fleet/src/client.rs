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
/// How long to wait for the next message before taking what came as all there is.
const QUIET: Duration = Duration::from_secs(2);

/// The last message of every subject of `stream` that matches `filter`, as the stream stood when
/// the call began: one per subject, read with an ordered consumer that delivers each subject's
/// last message once, in stream order, and then whatever is published after it was made. It
/// stops at the first subject seen twice (the start of those later messages) or when nothing
/// is pending, never waiting for live heartbeats to pause (a reader that waited for "nothing
/// pending" read them for 15 minutes). Stopping at the stream's last sequence read beforehand
/// dropped units (143 of 150 under load): one that published between that read and the
/// consumer's creation has its last message past it, and so do those delivered after it; the
/// consumer's own pending count at creation proved no better (1 of 150 in one run).
async fn last_per_subject(
    js: &jetstream::Context,
    stream: &str,
    filter: &str,
) -> Result<Vec<bytes::Bytes>, String> {
    let deadline = tokio::time::Instant::now() + READ_DEADLINE;
    let s = js
        .get_stream(stream)
        .await
        .map_err(|e| format!("stream {stream}: {e}"))?;
    let consumer = s
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            filter_subject: filter.into(),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("read {stream}: {e}"))?;
    let mut by_subject = std::collections::BTreeMap::new();
    if consumer.cached_info().num_pending == 0 {
        return Ok(Vec::new());
    }
    let mut msgs = consumer
        .messages()
        .await
        .map_err(|e| format!("read {stream}: {e}"))?;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "read {stream}: not done after {} s; {} unit(s) read so far",
                READ_DEADLINE.as_secs(),
                by_subject.len()
            ));
        }
        match tokio::time::timeout(QUIET.min(left), msgs.next()).await {
            Ok(Some(Ok(m))) => {
                // Each subject's last message comes once, in stream order; a subject seen again
                // is a message published after the consumer was made: the set is complete.
                if by_subject.contains_key(m.subject.as_str()) {
                    break;
                }
                let pending = m.info().map(|i| i.pending).unwrap_or(0);
                by_subject.insert(m.subject.to_string(), m.payload.clone());
                if pending == 0 {
                    break;
                }
            }
            Ok(Some(Err(e))) => return Err(format!("read {stream}: {e}")),
            // The stream had less than its start said (messages expired): that is all.
            Ok(None) | Err(_) => break,
        }
    }
    Ok(by_subject.into_values().collect())
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
