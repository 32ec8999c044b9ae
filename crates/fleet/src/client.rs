//! The operator's side of the control plane: `snbuf trigger --nats` and `snbuf fleet status`.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::stream::RawMessageErrorKind;
use async_nats::jetstream::{self, context::Publish, context::PublishErrorKind};
use futures::StreamExt;

use crate::connect::NatsOptions;
use crate::schema::*;
use snbuf_quantity::now_unix_ns;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("NATS at {servers}: {why}")]
    Nats { servers: String, why: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// An error of the NATS servers of `opts`, saying `why`.
pub(crate) fn nats_error(opts: &NatsOptions) -> impl Fn(String) -> FleetError + '_ {
    |why| FleetError::Nats {
        servers: opts.describe(),
        why,
    }
}

/// The longest an operator is kept waiting by `trigger --nats`, `fleet status` or `fleet
/// events`, whatever the cluster does: it answers, or fails saying why, within this.
pub const OPERATOR_ANSWER_WITHIN: Duration = Duration::from_secs(8);
/// What the commands' own deadlines add up to: a second short of the promise, for the process
/// to start, connect its runtime and print on a loaded machine.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(7);
const _: () = assert!(COMMAND_DEADLINE.as_millis() + 1000 <= OPERATOR_ANSWER_WITHIN.as_millis());
/// How long one JetStream request of an operator's command may take before it is tried again
/// (on a new connection, so possibly another server).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest one attempt of `trigger --nats` may take (connect, publish, acknowledgement)
/// before it is given up for a new one.
const PUBLISH_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(2500);
/// The same for a read (`fleet status`, `fleet events`, `fleet setup`): room for a large
/// fleet's read (`READ_DEADLINE`), and two attempts within `COMMAND_DEADLINE`.
const READ_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(3500);
const _: () = assert!(2 * READ_ATTEMPT_TIMEOUT.as_millis() <= COMMAND_DEADLINE.as_millis());

pub(crate) async fn connect(opts: &NatsOptions) -> Result<jetstream::Context, FleetError> {
    let client = opts.connect().await.map_err(nats_error(opts))?;
    Ok(jetstream::new(client))
}

/// Connected to any server of the cluster: the connection and the name of the server reached.
/// Streams are not touched: reading and publishing need only each stream's leader, never the
/// cluster's metadata leader, so they work while that one is being re-elected.
async fn open(
    opts: &NatsOptions,
) -> Result<(jetstream::Context, async_nats::Client, String), String> {
    let client = opts.connect().await?;
    let server = client.server_info().server_name;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(REQUEST_TIMEOUT);
    Ok((js, client, server))
}

/// Runs `attempt` on a fresh connection until it succeeds or `COMMAND_DEADLINE` has passed; each
/// attempt is cut off at the deadline. A server that is down, paused or without a JetStream
/// leader costs one attempt; the next connects anew and may reach another server.
async fn within_deadline<T, F, Fut>(opts: &NatsOptions, attempt: F) -> Result<T, FleetError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    within(opts, COMMAND_DEADLINE, READ_ATTEMPT_TIMEOUT, attempt).await
}

/// `within_deadline` with a deadline of its own, and `per_attempt` for each attempt.
async fn within<T, F, Fut>(
    opts: &NatsOptions,
    limit: Duration,
    per_attempt: Duration,
    mut attempt: F,
) -> Result<T, FleetError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut last;
    let mut attempts = 0;
    loop {
        attempts += 1;
        // Each attempt bounded on its own: one stuck on a server or a stream leader that went
        // away mid-request is left for a new connection, which may reach another server.
        let this_one = deadline.min(tokio::time::Instant::now() + per_attempt);
        match tokio::time::timeout_at(this_one, attempt()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if e.contains(crate::connect::REFUSED) => {
                return Err(nats_error(opts)(e));
            }
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = format!(
                    "an attempt got no answer within {} s",
                    per_attempt.as_secs_f64()
                )
            }
        }
        if let Some(why) = opts.denied() {
            return Err(nats_error(opts)(format!(
                "{}the server refused what these credentials may not do: {why}",
                crate::connect::REFUSED
            )));
        }
        if tokio::time::Instant::now() + Duration::from_millis(200) >= deadline {
            return Err(nats_error(opts)(format!(
                "no answer within {:.1} s ({attempts} attempt(s)); last: {last}",
                limit.as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the cluster said to a trigger.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TriggerAccepted {
    pub trigger_id: String,
    /// Its sequence number in the trigger stream.
    pub stream_sequence: u64,
    /// The server the accepted attempt went through.
    pub server: String,
    /// How many attempts it took (a server down or without a leader costs one).
    pub attempts: u32,
    /// The stream already held this trigger id (an earlier attempt was stored, its answer lost):
    /// stored once all the same.
    pub duplicate: bool,
    /// No acknowledgement came, and the trigger was found in the stream by looking it up.
    pub found_by_lookup: bool,
}

/// How long `trigger --nats` tries to have its trigger stored, and then how long it looks the
/// trigger up in the stream when no acknowledgement came: together the command's deadline, a
/// second under what the operator is promised.
pub const PUBLISH_DEADLINE: Duration = Duration::from_millis(4500);
pub const LOOKUP_DEADLINE: Duration = Duration::from_millis(2500);
const _: () = assert!(
    PUBLISH_DEADLINE.as_millis() + LOOKUP_DEADLINE.as_millis() <= COMMAND_DEADLINE.as_millis()
);
/// The most stream messages a look-up reads, newest first (triggers are a few a day).
const LOOKUP_MAX_MESSAGES: u64 = 256;

/// What the stream says of a trigger whose publish got no acknowledgement.
#[derive(Clone, Debug, PartialEq)]
pub enum TriggerLookup {
    /// It is there: the cluster stored it, and its answer was lost.
    Stored {
        stream_sequence: u64,
        server: String,
    },
    /// It was not there when looked up (every trigger stored since a minute before it was issued
    /// was read). A publish still in flight in the cluster could land later: a retry with the
    /// same id is safe either way.
    NotStored,
    /// The stream could not be read in time: it may or may not be there.
    Unknown(String),
}

/// A trigger whose publish was not acknowledged, and what its look-up found.
#[derive(Debug)]
pub struct NotAcknowledged {
    pub error: FleetError,
    pub lookup: TriggerLookup,
}

/// Broadcasts `t` to every unit: returns once the cluster has stored it (replicated as its
/// stream is), trying again on a new connection until `PUBLISH_DEADLINE`. The trigger id is the
/// message id, so however many attempts reach the stream it is stored once. Without an
/// acknowledgement, the trigger is looked up in the stream (`LOOKUP_DEADLINE`): an answer lost
/// with a server is not a trigger lost.
pub fn broadcast_trigger(
    opts: &NatsOptions,
    t: &TriggerMessage,
) -> Result<TriggerAccepted, NotAcknowledged> {
    let rt = runtime().map_err(|e| NotAcknowledged {
        error: e.into(),
        lookup: TriggerLookup::Unknown("no runtime".into()),
    })?;
    let error = match rt.block_on(publish_trigger(opts, t)) {
        Ok(accepted) => return Ok(accepted),
        Err(e) => e,
    };
    let lookup = rt.block_on(look_up(opts, t));
    match lookup {
        TriggerLookup::Stored {
            stream_sequence,
            server,
        } => Ok(TriggerAccepted {
            trigger_id: t.trigger_id.clone(),
            stream_sequence,
            server,
            attempts: 0,
            duplicate: false,
            found_by_lookup: true,
        }),
        lookup => Err(NotAcknowledged { error, lookup }),
    }
}

/// Trigger `t` looked up in the trigger stream, newest first, back to the triggers issued well
/// before it (a minute, for senders' clocks that differ), within `LOOKUP_DEADLINE`.
pub async fn look_up(opts: &NatsOptions, t: &TriggerMessage) -> TriggerLookup {
    let read = async {
        let (js, _client, server) = open(opts).await?;
        let mut stream = js
            .get_stream(TRIGGER_STREAM)
            .await
            .map_err(|e| format!("stream {TRIGGER_STREAM} via {server}: {e}"))?;
        let state = stream
            .info()
            .await
            .map_err(|e| format!("stream {TRIGGER_STREAM} via {server}: {e}"))?
            .state
            .clone();
        let oldest = state.first_sequence.max(1);
        let floor = t.issued_unix_ns.saturating_sub(60_000_000_000);
        let mut seq = state.last_sequence;
        let mut read = 0;
        while seq >= oldest && state.last_sequence > 0 {
            if read == LOOKUP_MAX_MESSAGES {
                return Err(format!(
                    "{read} triggers read back from sequence {} without reaching its time",
                    state.last_sequence
                ));
            }
            read += 1;
            match stream.get_raw_message(seq).await {
                Ok(m) => {
                    if let Ok(stored) = serde_json::from_slice::<TriggerMessage>(&m.payload) {
                        if stored.trigger_id == t.trigger_id {
                            return Ok(Some((seq, server)));
                        }
                    }
                    // Stored (by the server's clock) well before this trigger was issued: it
                    // cannot be further back.
                    let stored_ns = m.time.unix_timestamp_nanos().max(0) as u64;
                    if stored_ns < floor {
                        break;
                    }
                }
                // A message deleted from the stream (a gap in the sequence) is passed over.
                Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {}
                Err(e) => return Err(format!("read sequence {seq} via {server}: {e}")),
            }
            seq -= 1;
        }
        Ok(None)
    };
    match tokio::time::timeout(LOOKUP_DEADLINE, read).await {
        Ok(Ok(Some((stream_sequence, server)))) => TriggerLookup::Stored {
            stream_sequence,
            server,
        },
        Ok(Ok(None)) => TriggerLookup::NotStored,
        Ok(Err(e)) => TriggerLookup::Unknown(e),
        Err(_) => TriggerLookup::Unknown(format!(
            "the trigger stream did not answer within {:.1} s",
            LOOKUP_DEADLINE.as_secs_f64()
        )),
    }
}

async fn publish_trigger(
    opts: &NatsOptions,
    t: &TriggerMessage,
) -> Result<TriggerAccepted, FleetError> {
    let body = bytes::Bytes::from(serde_json::to_vec(t).expect("serialises"));
    let mut attempts = 0u32;
    within(opts, PUBLISH_DEADLINE, PUBLISH_ATTEMPT_TIMEOUT, || {
        attempts += 1;
        let (body, attempts) = (body.clone(), attempts);
        async move {
            let (js, client, server) = open(opts).await?;
            // The fast path first (no acknowledgement, at most once per connected unit), then
            // the copy the cluster stores.
            client
                .publish(TRIGGER_FAST_SUBJECT, body.clone())
                .await
                .map_err(|e| format!("publish trigger via {server}: {e}"))?;
            let publish = Publish::build().payload(body).message_id(&t.trigger_id);
            let sent = js
                .send_publish(TRIGGER_SUBJECT, publish)
                .await
                .map_err(|e| format!("publish trigger via {server}: {e}"))?;
            let ack = match sent.await {
                Ok(ack) => ack,
                Err(e) if e.kind() == PublishErrorKind::StreamNotFound => {
                    // No stream answered: it does not exist yet (created now, and the next
                    // attempt publishes again), or its leader is being elected.
                    crate::layout::ensure(&js, opts.replicas_for(&client)).await?;
                    return Err(format!("no trigger stream answered via {server}"));
                }
                Err(e) => return Err(format!("trigger not stored via {server}: {e}")),
            };
            Ok(TriggerAccepted {
                trigger_id: t.trigger_id.clone(),
                stream_sequence: ack.sequence,
                server,
                attempts,
                duplicate: ack.duplicate,
                found_by_lookup: false,
            })
        }
    })
    .await
}

/// `snbuf fleet setup`: every fleet stream created, or changed to the fleet's settings with
/// `opts.replicas` copies (default as for creation). One line per stream saying what was done.
pub fn setup_streams(opts: &NatsOptions) -> Result<Vec<String>, FleetError> {
    runtime()?.block_on(within_deadline(opts, || async {
        let client = opts.connect().await?;
        let js = jetstream::new(client.clone());
        crate::layout::setup(&js, opts.replicas_for(&client)).await
    }))
}

/// A unit as `fleet status` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UnitView {
    pub status: Heartbeat,
    /// Seconds since its last heartbeat.
    pub silent_s: f64,
    /// No heartbeat for `MISSING_AFTER_MS`: stopped, crashed or cut off.
    pub missing: bool,
}

/// Every unit that ever reported, with its latest status, sorted by id.
pub fn fleet_status(opts: &NatsOptions) -> Result<Vec<UnitView>, FleetError> {
    runtime()?.block_on(within_deadline(opts, || async {
        let (js, client, _) = open(opts).await?;
        let mut out = Vec::new();
        let now = now_unix_ns();
        let Some(latest) = last_per_subject(&js, STATUS_STREAM, STATUS_SUBJECTS).await? else {
            // No fleet here yet: its streams made, as the first unit would, and nobody to show.
            crate::layout::ensure(&js, opts.replicas_for(&client)).await?;
            return Ok(out);
        };
        for msg in latest {
            // A status another version wrote, or garbage: skipped.
            let Ok(status) = serde_json::from_slice::<Heartbeat>(&msg) else {
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
    }))
}

/// The longest a read of the fleet's state may take, whatever the fleet publishes meanwhile.
pub const READ_DEADLINE: Duration = READ_ATTEMPT_TIMEOUT;
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
) -> Result<Option<Vec<bytes::Bytes>>, String> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    use futures::TryStreamExt;
    let read = async {
        let s = match js.get_stream(stream).await {
            Ok(s) => s,
            Err(e) if crate::layout::is_not_found(&e) => return Ok(None),
            Err(e) => return Err(format!("stream {stream}: {e}")),
        };
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
            .map(Some)
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
/// message when the call began, within `COMMAND_DEADLINE`; a read that could not get that far
/// is an error, never a shorter list.
pub fn recent_events(
    opts: &NatsOptions,
    max: usize,
    wait: Duration,
) -> Result<Vec<UnitEvent>, FleetError> {
    runtime()?.block_on(within_deadline(opts, || async {
        let (js, _, server) = open(opts).await?;
        let mut stream = match js.get_stream(EVENT_STREAM).await {
            Ok(s) => s,
            Err(e) if crate::layout::is_not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(format!("stream {EVENT_STREAM} via {server}: {e}")),
        };
        let state = stream
            .info()
            .await
            .map_err(|e| format!("stream {EVENT_STREAM}: {e}"))?
            .state
            .clone();
        if state.messages == 0 {
            return Ok(Vec::new());
        }
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
            .await
            .map_err(|e| format!("read events: {e}"))?;
        let mut msgs = consumer
            .messages()
            .await
            .map_err(|e| format!("read events: {e}"))?;
        let mut out = Vec::new();
        while out.len() < max {
            match tokio::time::timeout(wait, msgs.next()).await {
                Ok(Some(Ok(m))) => {
                    if let Ok(e) = serde_json::from_slice::<UnitEvent>(&m.payload) {
                        out.push(e);
                    }
                    if m.info()
                        .map_or(true, |i| i.stream_sequence >= state.last_sequence)
                    {
                        return Ok(out);
                    }
                }
                Ok(Some(Err(e))) => return Err(format!("read events via {server}: {e}")),
                Ok(None) | Err(_) => {
                    return Err(format!(
                        "read events via {server}: {} read, then none for {} ms (the stream holds up to sequence {})",
                        out.len(),
                        wait.as_millis(),
                        state.last_sequence
                    ))
                }
            }
        }
        Ok(out)
    }))
}
