//! A unit's link to the fleet (`snbuf serve --nats URL --unit ID`): it takes triggers from
//! JetStream, reports a heartbeat into the status stream every second, and publishes burst
//! events. Recording never waits for it: it runs on its own thread, talks to the unit through the
//! same requests as the control socket, and when NATS is unreachable the unit records locally
//! while the client library reconnects in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use async_nats::jetstream::{context::Publish, AckKind};
use futures::StreamExt;
use serde_json::{json, Value};
use snbuf_unit::protocol::{At, TriggerRequest};
use snbuf_unit::service::control::Server;

use crate::connect::NatsOptions;
use crate::journal::{Outcome, TriggerJournal};
use crate::schema::*;
use snbuf_quantity::now_unix_ns;

/// Log lines go to the caller (serve prints them).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// What the unit's exporter reports, if it has one: its progress for the heartbeat, and the
/// bursts it exported since the last call (each published as an `exported` event).
pub trait ExportReporter: Send + Sync {
    fn progress(&self) -> serde_json::Value;
    fn take_exported(&self) -> Vec<String>;
}

pub struct UnitLink {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UnitLink {
    /// Starts the link on its own thread. Returns it, and an error line if NATS could not be
    /// reached at once (the link keeps trying; the unit records locally meanwhile). Fails only
    /// when the unit's trigger journal cannot be read or created.
    pub fn start(
        opts: NatsOptions,
        unit_id: String,
        server: Arc<Server>,
        export: Option<Arc<dyn ExportReporter>>,
        log: Log,
    ) -> std::io::Result<(UnitLink, Option<String>)> {
        let journal = TriggerJournal::open(&server.unit().config().output_dir)
            .map_err(std::io::Error::other)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // One quick attempt, for a clear message at start.
        let first = rt.block_on(opts.connect());
        let unreachable = first.err().map(|e| {
            format!(
                "NATS at {} is unreachable ({e}); recording locally, retrying in the background",
                opts.describe()
            )
        });
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("snbuf-nats".into())
            .spawn(move || {
                rt.block_on(run(opts, unit_id, server, export, journal, log, stop2));
            })?;
        Ok((
            UnitLink {
                stop,
                thread: Some(thread),
            },
            unreachable,
        ))
    }
}

impl Drop for UnitLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// State the link keeps across reconnections.
struct LinkState {
    unit: String,
    server: Arc<Server>,
    log: Log,
    /// What this unit did with each trigger, on its disk: the duplicate check and the outbox of
    /// `missed` reports.
    journal: TriggerJournal,
    /// Bursts already published as events.
    published: u64,
    export: Option<Arc<dyn ExportReporter>>,
    /// Exported bursts collected but not yet published (kept across a lost connection).
    exported_unpublished: Vec<String>,
    /// The trigger consumer this run bound to, once it has.
    consumer: Option<jetstream::consumer::Info>,
    /// The last error of a beat, said once until it changes.
    last_error: Option<String>,
    /// Triggers handled from the fast path whose JetStream copy has not come yet.
    fast_handled: std::collections::HashSet<String>,
}

async fn run(
    opts: NatsOptions,
    unit: String,
    server: Arc<Server>,
    export: Option<Arc<dyn ExportReporter>>,
    journal: TriggerJournal,
    log: Log,
    stop: Arc<AtomicBool>,
) {
    let mut st = LinkState {
        unit,
        export,
        exported_unpublished: Vec::new(),
        published: server.recent_bursts().0,
        server,
        log,
        journal,
        consumer: None,
        last_error: None,
        fast_handled: Default::default(),
    };
    let mut connected_once = false;
    while !stop.load(Ordering::Relaxed) {
        match session(&opts, &mut st, &stop).await {
            Ok(()) => return,
            Err(e) => {
                if connected_once || !e.contains("connect") {
                    (st.log)(&format!("NATS: {e}; retrying"));
                }
                connected_once = true;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// One connected session: streams (checked once per run) and consumer, then serve until the
/// trigger subscription fails. Only the trigger path ends a session: a heartbeat, event or report
/// that cannot be stored (a stream's leader being elected) is tried again at the next beat.
async fn session(opts: &NatsOptions, st: &mut LinkState, stop: &AtomicBool) -> Result<(), String> {
    let client = opts
        .connect()
        .await
        .map_err(|e| format!("connect {}: {e}", opts.describe()))?;
    let server_name = client.server_info().server_name;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(REQUEST_TIMEOUT);
    if st.consumer.is_none() {
        let (_, warnings) = crate::layout::ensure(&js, opts.replicas_for(&client)).await?;
        for w in warnings {
            (st.log)(&format!("NATS: {w}"));
        }
    }
    let mut fast = client
        .subscribe(TRIGGER_FAST_SUBJECT)
        .await
        .map_err(|e| format!("subscribe {TRIGGER_FAST_SUBJECT}: {e}"))?;
    let consumer = trigger_consumer(&js, st).await?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(8)
        .heartbeat(PULL_HEARTBEAT)
        .expires(PULL_EXPIRES)
        .messages()
        .await
        .map_err(|e| format!("trigger subscription: {e}"))?;
    (st.log)(&format!(
        "NATS: connected to {server_name} ({}) as unit {}",
        opts.describe(),
        st.unit
    ));
    catch_up(&js, st).await;
    let mut beat = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        tokio::select! {
            m = messages.next() => match m {
                Some(Ok(msg)) => {
                    // Acknowledged only once its outcome is in the journal: a trigger whose
                    // outcome could not be kept is delivered again.
                    match handle_trigger(&js, st, &msg.payload, Some(&msg)).await {
                        Ok(()) => {
                            if let Err(e) = msg.ack().await {
                                (st.log)(&format!("NATS: ack: {e} (a redelivery is found in the journal)"));
                            }
                        }
                        Err(e) => (st.log)(&format!("NATS: trigger not acknowledged: {e}")),
                    }
                }
                Some(Err(e)) => return Err(format!("trigger stream: {e}")),
                None => return Err("trigger stream ended".into()),
            },
            m = fast.next() => match m {
                // The fast path's copy: whichever copy comes first is handled, the other is a
                // duplicate. Nothing to acknowledge; a copy that could not be kept comes again
                // through JetStream.
                Some(m) => {
                    if let Err(e) = handle_trigger(&js, st, &m.payload, None).await {
                        (st.log)(&format!("NATS: trigger (fast path): {e}"));
                    }
                }
                None => return Err("fast trigger subscription ended".into()),
            },
            _ = beat.tick() => {
                let sent = async {
                    heartbeat(&js, st).await?;
                    publish_burst_events(&js, st).await?;
                    publish_owed(&js, st).await
                };
                match sent.await {
                    Ok(()) => st.last_error = None,
                    Err(e) => {
                        if st.last_error.as_ref() != Some(&e) {
                            (st.log)(&format!("NATS: {e}; tried again every second"));
                            st.last_error = Some(e);
                        }
                    }
                }
            }
        }
    }
}

/// The unit's durable trigger consumer: looked up or created; when the cluster cannot answer
/// that (no metadata leader during an election), the one this run already bound to, whose pulls
/// only its own leader serves.
async fn trigger_consumer(
    js: &jetstream::Context,
    st: &mut LinkState,
) -> Result<jetstream::consumer::Consumer<pull::Config>, String> {
    let name = format!("unit-{}", st.unit);
    let config = pull::Config {
        durable_name: Some(name.clone()),
        filter_subject: TRIGGER_SUBJECT.into(),
        // A new unit starts with the next trigger; an existing one resumes where it was.
        deliver_policy: DeliverPolicy::New,
        ack_policy: AckPolicy::Explicit,
        ack_wait: ACK_WAIT,
        ..Default::default()
    };
    let looked_up = async {
        let stream = js
            .get_stream_no_info(TRIGGER_STREAM)
            .await
            .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?;
        if let Ok(c) = stream.get_consumer(&name).await {
            return Ok(c);
        }
        // Made anew (a new unit, or a consumer the cluster lost): a unit that handled triggers
        // before starts right after the last one its journal holds, so none sent meanwhile is
        // skipped (the few handled by the fast path since come again, as duplicates). Unless
        // the stream is not that old (deleted and made again): then from the next trigger.
        let mut config = config.clone();
        if let Some(last) = st.journal.last_stream_seq() {
            let mut info = js
                .get_stream(TRIGGER_STREAM)
                .await
                .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?;
            let stored = info
                .info()
                .await
                .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?
                .state
                .last_sequence;
            if last < stored {
                config.deliver_policy = DeliverPolicy::ByStartSequence {
                    start_sequence: last + 1,
                };
            }
        }
        stream
            .create_consumer(config)
            .await
            .map_err(|e| format!("trigger consumer: {e}"))
    };
    match looked_up.await {
        Ok(c) => {
            st.consumer = Some(c.cached_info().clone());
            Ok(c)
        }
        Err(e) => match &st.consumer {
            Some(info) => Ok(jetstream::consumer::Consumer::new(
                config,
                info.clone(),
                js.clone(),
            )),
            None => Err(e),
        },
    }
}

/// The longest one publish of a unit waits for JetStream's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The trigger subscription's idle heartbeat: two missed (its consumer's leader gone, the
/// connection dead) end the session, which reconnects.
const PULL_HEARTBEAT: Duration = Duration::from_secs(1);
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long JetStream waits for a unit's acknowledgement before it delivers a trigger again. A
/// trigger delivered on a connection that died before the unit saw it comes again after this,
/// so it is short next to a latency buffer; handling one takes milliseconds, and a trigger that
/// waits for a burst in progress says so with progress acknowledgements.
const ACK_WAIT: Duration = Duration::from_secs(5);

async fn publish_event(
    js: &jetstream::Context,
    st: &LinkState,
    event: &str,
    burst: Option<&str>,
    trigger: Option<&str>,
    detail: Value,
) -> Result<(), String> {
    let e = UnitEvent {
        schema: SCHEMA,
        unit: st.unit.clone(),
        sent_unix_ns: now_unix_ns(),
        event: event.into(),
        burst_id: burst.map(str::to_string),
        trigger_id: trigger.map(str::to_string),
        detail,
    };
    let body = serde_json::to_vec(&e).expect("events serialise");
    let mut publish = Publish::build().payload(body.into());
    // One event of a kind per trigger or burst: a publish retried after a lost acknowledgement
    // is stored once. (A `duplicate` may happen again, and is said again.)
    if event != "duplicate" {
        if let Some(key) = trigger.or(burst) {
            publish = publish.message_id(format!("{}.{event}.{key}", st.unit));
        }
    }
    js.send_publish(event_subject(&st.unit), publish)
        .await
        .map_err(|e| format!("publish event: {e}"))?
        .await
        .map_err(|e| format!("event not stored: {e}"))?;
    Ok(())
}

/// Handles one delivered trigger. Ok: its outcome is kept (recorded, missed, a duplicate, or
/// malformed and ignored) and it may be acknowledged; Err: it could not be kept, and must not be.
///
/// `msg` is the JetStream delivery, or None for the fast path's copy.
///
/// One piece: the checks a trigger goes through, in order (parse, duplicate, data clock, window
/// left, busy, journal), each ending in its outcome; the order is the exactly-once argument.
async fn handle_trigger(
    js: &jetstream::Context,
    st: &mut LinkState,
    payload: &[u8],
    msg: Option<&jetstream::Message>,
) -> Result<(), String> {
    let t: TriggerMessage = match serde_json::from_slice(payload) {
        Ok(t) => t,
        Err(e) => {
            (st.log)(&format!(
                "NATS: malformed trigger ignored ({e}): {}",
                String::from_utf8_lossy(&payload[..payload.len().min(200)])
            ));
            return Ok(());
        }
    };
    let id = t.trigger_id.clone();
    let report = |st: &LinkState, line: String| (st.log)(&format!("NATS trigger {id}: {line}"));
    let unit = st.server.unit();
    let config = unit.config();
    if st.journal.get(&id).is_some() || config.output_dir.join(&id).exists() {
        // One copy on each path is the design, not a duplicate: nothing to say.
        if msg.is_none() || st.fast_handled.remove(&id) {
            return Ok(());
        }
        report(st, "already handled: duplicate ignored".into());
        let _ = publish_event(js, st, "duplicate", Some(&id), Some(&id), json!({})).await;
        return Ok(());
    }
    if msg.is_none() {
        st.fast_handled.insert(id.clone());
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
    let delay_s = now_unix_ns().saturating_sub(t.issued_unix_ns) as f64 / 1e9;
    let Some(at) = at else {
        // Nothing buffered yet: the unit has no data clock to place a wall-clock time on.
        let why = "no frame has arrived yet: this unit has no data clock to place the trigger on";
        return missed(js, st, (&id, stream_seq(msg)), why.into(), delay_s).await;
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
        return missed(js, st, (&id, stream_seq(msg)), why, delay_s).await;
    }
    let req = TriggerRequest {
        at: Some(At::Ticks(at)),
        pre_s: t.pre_s,
        post_s: t.post_s,
        burst_id: Some(id.clone()),
    };
    // A burst in progress holds the unit: the trigger waits for it (its window stays in the
    // buffer for about the buffer's length), heartbeats going on, rather than being refused.
    let wait_until = Instant::now() + config.buffer;
    let mut progress_sent = Instant::now();
    let reply = loop {
        match st.server.trigger(&req) {
            Ok(reply) => break reply,
            Err(_) if st.server.burst_counts().1 && Instant::now() < wait_until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if progress_sent.elapsed() > Duration::from_secs(1) {
                    progress_sent = Instant::now();
                    // Still being handled: JetStream must not deliver it again meanwhile.
                    if let Some(msg) = msg {
                        let _ = msg.ack_with(AckKind::Progress).await;
                    }
                    let _ = heartbeat(js, st).await;
                }
            }
            Err(why) => {
                report(st, format!("refused: {why}"));
                return missed(
                    js,
                    st,
                    (&id, stream_seq(msg)),
                    format!("refused: {why}"),
                    delay_s,
                )
                .await;
            }
        }
    };
    st.journal
        .record(&id, Outcome::Recording, None, delay_s, stream_seq(msg))
        .map_err(|e| format!("trigger {id} is recording, but its journal failed: {e}"))?;
    let w = &reply.window;
    report(
        st,
        format!(
            "recording window [{}, {}) ticks, {:.3} s before to {:.3} s after {} (came {}, {delay_s:.3} s after it was sent)",
            w.window_start_timestamp,
            w.window_end_timestamp,
            w.pre_s.unwrap_or(0.0),
            w.post_s.unwrap_or(0.0),
            w.trigger_timestamp,
            if msg.is_some() { "through JetStream" } else { "by the fast path" }
        ),
    );
    if delay_s > 2.0 {
        let why = format!("delivered {delay_s:.1} s after it was issued (this unit was not running or not connected): recording what is left of its window");
        let detail = json!({"reason": why, "delay_s": delay_s});
        let _ = publish_event(js, st, "late", Some(&id), Some(&id), detail).await;
    }
    Ok(())
}

/// Trigger `id` cannot be recorded by this unit: kept in the journal (Err if it cannot be),
/// logged, and published as `missed` now or, if NATS fails meanwhile, at the next beat.
async fn missed(
    js: &jetstream::Context,
    st: &mut LinkState,
    (id, seq): (&str, Option<u64>),
    why: String,
    delay_s: f64,
) -> Result<(), String> {
    (st.log)(&format!("NATS trigger {id}: missed: {why}"));
    st.journal
        .record(id, Outcome::Missed, Some(why), delay_s, seq)
        .map_err(|e| format!("trigger {id} was missed, and its journal failed: {e}"))?;
    let _ = publish_owed(js, st).await;
    Ok(())
}

/// How many of the newest triggers a reconnecting unit reads straight from the stream.
const CATCH_UP_TRIGGERS: u64 = 16;

/// Triggers this unit may have missed while cut off, read straight from the trigger stream (its
/// leader answers; the unit's consumer may still be waiting for its own leader, which after a
/// pause can take longer than the buffer holds the window). Only those issued since this unit
/// started and within its buffer's length: the ones it can still record; older ones come through
/// its consumer as before. Handled like the fast path's copies; best effort, within 3 s.
async fn catch_up(js: &jetstream::Context, st: &mut LinkState) {
    let read = async {
        let mut stream = js.get_stream(TRIGGER_STREAM).await.ok()?;
        let last = stream.info().await.ok()?.state.last_sequence;
        let mut due = Vec::new();
        for seq in last.saturating_sub(CATCH_UP_TRIGGERS - 1).max(1)..=last {
            if let Ok(m) = stream.get_raw_message(seq).await {
                due.push(m.payload);
            }
        }
        Some(due)
    };
    let Ok(Some(due)) = tokio::time::timeout(Duration::from_secs(3), read).await else {
        return;
    };
    let unit = st.server.unit();
    let now = now_unix_ns();
    let started = now.saturating_sub(unit.uptime().as_nanos() as u64);
    let oldest = now.saturating_sub(unit.config().buffer.as_nanos() as u64);
    for payload in due {
        let Ok(t) = serde_json::from_slice::<TriggerMessage>(&payload) else {
            continue;
        };
        if t.issued_unix_ns < started.max(oldest) || st.journal.get(&t.trigger_id).is_some() {
            continue;
        }
        (st.log)(&format!(
            "NATS trigger {}: read from the stream on reconnecting",
            t.trigger_id
        ));
        if let Err(e) = handle_trigger(js, st, &payload, None).await {
            (st.log)(&format!("NATS: trigger (catch-up): {e}"));
        }
    }
}

/// The trigger stream's sequence of a JetStream delivery.
fn stream_seq(msg: Option<&jetstream::Message>) -> Option<u64> {
    msg.and_then(|m| m.info().ok()).map(|i| i.stream_sequence)
}

/// Publishes every `missed` report the journal still owes the fleet, marking each once stored.
async fn publish_owed(js: &jetstream::Context, st: &mut LinkState) -> Result<(), String> {
    for (id, h) in st.journal.owed() {
        let detail = json!({"reason": h.reason, "delay_s": h.delay_s});
        publish_event(js, st, "missed", None, Some(&id), detail).await?;
        st.journal.mark_published(&id)?;
    }
    Ok(())
}

async fn heartbeat(js: &jetstream::Context, st: &LinkState) -> Result<(), String> {
    let unit = st.server.unit();
    let totals = unit.totals();
    let cap = unit.buffer_capacity_frames().max(1) as f64;
    let (total, recent) = st.server.recent_bursts();
    let last = recent.last().map(|b| BurstSummary {
        burst_id: b.burst_id.clone(),
        state: b.state.clone(),
        frames: b.frames,
        lost_frames: b.lost_frames,
    });
    let status = UnitStatus {
        schema: SCHEMA,
        unit: st.unit.clone(),
        sent_unix_ns: now_unix_ns(),
        state: if st.server.burst_counts().1 {
            "recording"
        } else {
            "idle"
        }
        .into(),
        uptime_s: unit.uptime().as_secs_f64(),
        links: unit.config().links,
        buffer_fill: totals
            .iter()
            .map(|l| l.buffer_fill_frames as f64 / cap)
            .fold(0.0, f64::max),
        durable_watermark: totals.iter().map(|l| l.durable_until_timestamp).collect(),
        bursts_total: total,
        last_burst: last,
        missed_triggers: st.journal.missed(),
        export: st.export.as_ref().map(|e| e.progress()),
    };
    js.publish(
        status_subject(&st.unit),
        serde_json::to_vec(&status)
            .expect("status serialises")
            .into(),
    )
    .await
    .map_err(|e| format!("heartbeat: {e}"))?
    .await
    .map_err(|e| format!("heartbeat not stored: {e}"))?;
    Ok(())
}

/// Publishes an event for every burst that finished since the last call.
async fn publish_burst_events(js: &jetstream::Context, st: &mut LinkState) -> Result<(), String> {
    let (total, recent) = st.server.recent_bursts();
    let new = (total - st.published).min(recent.len() as u64) as usize;
    for b in &recent[recent.len() - new..] {
        let detail = serde_json::to_value(b).expect("outcomes serialise");
        let id = &b.burst_id;
        publish_event(js, st, &b.state, Some(id), Some(id), detail).await?;
    }
    st.published = total;
    if let Some(e) = &st.export {
        st.exported_unpublished.extend(e.take_exported());
    }
    while let Some(id) = st.exported_unpublished.first().cloned() {
        publish_event(js, st, "exported", Some(&id), Some(&id), json!({})).await?;
        st.exported_unpublished.remove(0);
    }
    Ok(())
}
