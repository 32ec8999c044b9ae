//! A unit's link to the fleet (`snbuf serve --nats URL --unit ID`): it takes triggers from
//! JetStream, reports a heartbeat into the status stream every second, and publishes burst
//! events. Recording never waits for it: it runs on its own thread, talks to the unit through the
//! same requests as the control socket, and when NATS is unreachable the unit records locally
//! while the client library reconnects in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
        let stop = Arc::new(AtomicBool::new(false));
        let link = Arc::new(Link {
            unit: unit_id,
            published: std::sync::atomic::AtomicU64::new(server.recent_bursts().0),
            server,
            log,
            book: Mutex::new(Book {
                journal,
                fast_handled: FastHandled::default(),
                exported_unpublished: Vec::new(),
                consumer: None,
                layout_checked: false,
            }),
            decide: tokio::sync::Mutex::new(()),
            export,
            stop: stop.clone(),
        });
        // One quick attempt, for a clear message at start: the connection the fast path, the
        // heartbeats and the events use for the unit's whole run.
        let caught_up = Arc::new(tokio::sync::Notify::new());
        let first = rt.block_on(opts.connect_notifying(Some(caught_up.clone())));
        let unreachable = first.as_ref().err().map(|e| {
            format!(
                "NATS at {} is unreachable ({e}); recording locally, retrying in the background",
                opts.describe()
            )
        });
        let thread = std::thread::Builder::new()
            .name("snbuf-nats".into())
            .spawn(move || {
                rt.block_on(run(opts, link, first.ok(), caught_up));
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

/// What the link's tasks share.
struct Link {
    unit: String,
    server: Arc<Server>,
    log: Log,
    /// Bursts already published as events.
    published: std::sync::atomic::AtomicU64,
    book: Mutex<Book>,
    /// Held while one copy of a trigger is decided (duplicate check, window, the unit's answer,
    /// journal), so the two copies of a trigger are never both taken. Never held across a wait
    /// for a burst in progress: a copy that waits lets the other be decided meanwhile.
    decide: tokio::sync::Mutex<()>,
    export: Option<Arc<dyn ExportReporter>>,
    stop: Arc<AtomicBool>,
}

/// The link's state across reconnections; locked briefly, never across an await.
struct Book {
    /// What this unit did with each trigger, on its disk: the duplicate check and the outbox of
    /// `missed` reports.
    journal: TriggerJournal,
    /// Triggers handled from the fast path whose JetStream copy has not come yet.
    fast_handled: FastHandled,
    /// Exported bursts collected but not yet published (kept across a lost connection).
    exported_unpublished: Vec<String>,
    /// The trigger consumer this run bound to, once it has.
    consumer: Option<jetstream::consumer::Info>,
    /// The fleet's streams were checked (once per run).
    layout_checked: bool,
}

impl Link {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("the link's book")
    }

    fn say(&self, line: &str) {
        (self.log)(line)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The fast path's ids whose JetStream copy is still due, so that copy is known as the design's
/// second copy rather than a duplicate. Bounded: an id is dropped once its copy came, or after
/// `FAST_HANDLED_KEPT` (JetStream's copy comes within seconds, or after a consumer is made anew,
/// within its duplicate window), or when more than `FAST_HANDLED_MAX` are held (the oldest).
#[derive(Default)]
struct FastHandled {
    ids: std::collections::VecDeque<(String, Instant)>,
}

const FAST_HANDLED_KEPT: Duration = Duration::from_secs(3600);
const FAST_HANDLED_MAX: usize = 4096;

impl FastHandled {
    fn insert(&mut self, id: &str) {
        while self.ids.len() >= FAST_HANDLED_MAX
            || self
                .ids
                .front()
                .is_some_and(|(_, at)| at.elapsed() > FAST_HANDLED_KEPT)
        {
            self.ids.pop_front();
        }
        self.ids.push_back((id.to_string(), Instant::now()));
        assert!(self.ids.len() <= FAST_HANDLED_MAX);
    }

    /// Whether `id` was handled from the fast path (and forgets it).
    fn remove(&mut self, id: &str) -> bool {
        match self.ids.iter().position(|(i, _)| i == id) {
            Some(k) => {
                self.ids.remove(k);
                true
            }
            None => false,
        }
    }
}

/// The link's tasks: the fast path and the heartbeats on one connection kept for the whole run
/// (the client library moves it to another server when its server fails, and subscribes again
/// there), the JetStream consumer on a connection of its own, made anew whenever its session
/// fails. So a consumer waiting for its leader (seconds to tens of seconds during an election)
/// never holds the fast path's copy of a trigger. Each delivered trigger is handled on a task of
/// its own: one that waits for a burst in progress holds neither path.
async fn run(
    opts: NatsOptions,
    link: Arc<Link>,
    first: Option<async_nats::Client>,
    caught_up: Arc<tokio::sync::Notify>,
) {
    let consumer = tokio::spawn(consumer_path(opts.clone(), link.clone()));
    let mut client = first;
    while client.is_none() && !link.stopping() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        client = opts.connect_notifying(Some(caught_up.clone())).await.ok();
    }
    let Some(client) = client else {
        consumer.abort();
        return;
    };
    let mut js = jetstream::new(client.clone());
    js.set_timeout(REQUEST_TIMEOUT);
    let fast = tokio::spawn(fast_path(client, js.clone(), link.clone()));
    let beats = tokio::spawn(beats(js.clone(), link.clone()));
    let catch_ups = tokio::spawn({
        let (js, link) = (js.clone(), link.clone());
        async move {
            // On every (re)connection of the run's connection: the triggers issued while it was
            // away, read straight from the stream.
            loop {
                caught_up.notified().await;
                catch_up(&js, &link).await;
            }
        }
    });
    while !link.stopping() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for task in [consumer, fast, beats, catch_ups] {
        task.abort();
    }
}

/// The fast path: every trigger published on plain NATS, handled the moment it arrives.
async fn fast_path(client: async_nats::Client, js: jetstream::Context, link: Arc<Link>) {
    while !link.stopping() {
        let mut sub = match client.subscribe(TRIGGER_FAST_SUBJECT).await {
            Ok(s) => s,
            Err(e) => {
                link.say(&format!(
                    "NATS: subscribe {TRIGGER_FAST_SUBJECT}: {e}; retrying"
                ));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(m) = sub.next().await {
            // Whichever copy comes first is handled, the other is found in the journal. Nothing
            // to acknowledge; a copy that could not be kept comes again through JetStream.
            let (js, link) = (js.clone(), link.clone());
            tokio::spawn(async move {
                if let Err(e) = handle_trigger(&js, &link, &m.payload, None).await {
                    link.say(&format!("NATS: trigger (fast path): {e}"));
                }
            });
        }
        link.say("NATS: the fast trigger subscription ended; subscribing again");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Every second: the heartbeat, the events of bursts that ended, and the `missed` reports the
/// journal still owes. One that cannot be stored (a stream's leader being elected) is tried
/// again at the next beat.
async fn beats(js: jetstream::Context, link: Arc<Link>) {
    let mut beat = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error: Option<String> = None;
    loop {
        beat.tick().await;
        let sent = async {
            heartbeat(&js, &link).await?;
            publish_burst_events(&js, &link).await?;
            publish_owed(&js, &link).await
        };
        match sent.await {
            Ok(()) => last_error = None,
            Err(e) => {
                if last_error.as_ref() != Some(&e) {
                    link.say(&format!("NATS: {e}; tried again every second"));
                    last_error = Some(e);
                }
            }
        }
    }
}

/// The JetStream path: the unit's durable consumer, re-established in the background whenever
/// its session fails (a server gone, a leader being elected), on a connection of its own.
async fn consumer_path(opts: NatsOptions, link: Arc<Link>) {
    let mut connected_once = false;
    while !link.stopping() {
        match consumer_session(&opts, &link).await {
            Ok(()) => return,
            Err(e) => {
                if connected_once || !e.contains("connect") {
                    link.say(&format!("NATS: {e}; retrying"));
                }
                connected_once = true;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// One session of the consumer: streams (checked once per run) and consumer, then its triggers
/// until the subscription fails.
async fn consumer_session(opts: &NatsOptions, link: &Arc<Link>) -> Result<(), String> {
    let client = opts
        .connect()
        .await
        .map_err(|e| format!("connect {}: {e}", opts.describe()))?;
    let server_name = client.server_info().server_name;
    let mut js = jetstream::new(client.clone());
    js.set_timeout(REQUEST_TIMEOUT);
    if !link.book().layout_checked {
        let (_, warnings) = crate::layout::ensure(&js, opts.replicas_for(&client)).await?;
        for w in warnings {
            link.say(&format!("NATS: {w}"));
        }
        link.book().layout_checked = true;
    }
    let consumer = trigger_consumer(&js, link).await?;
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(8)
        .heartbeat(PULL_HEARTBEAT)
        .expires(PULL_EXPIRES)
        .messages()
        .await
        .map_err(|e| format!("trigger subscription: {e}"))?;
    link.say(&format!(
        "NATS: trigger consumer on {server_name} ({}) as unit {}",
        opts.describe(),
        link.unit
    ));
    catch_up(&js, link).await;
    loop {
        if link.stopping() {
            return Ok(());
        }
        let next = tokio::time::timeout(Duration::from_millis(250), messages.next()).await;
        match next {
            Err(_) => {}
            Ok(Some(Ok(msg))) => {
                let (js, link) = (js.clone(), link.clone());
                tokio::spawn(async move {
                    // Acknowledged only once its outcome is in the journal: a trigger whose
                    // outcome could not be kept is delivered again.
                    match handle_trigger(&js, &link, &msg.payload, Some(&msg)).await {
                        Ok(()) => {
                            if let Err(e) = msg.ack().await {
                                link.say(&format!(
                                    "NATS: ack: {e} (a redelivery is found in the journal)"
                                ));
                            }
                        }
                        Err(e) => link.say(&format!("NATS: trigger not acknowledged: {e}")),
                    }
                });
            }
            Ok(Some(Err(e))) => return Err(format!("trigger stream: {e}")),
            Ok(None) => return Err("trigger stream ended".into()),
        }
    }
}

/// The unit's durable trigger consumer: looked up or created; when the cluster cannot answer
/// that (no metadata leader during an election), the one this run already bound to, whose pulls
/// only its own leader serves.
async fn trigger_consumer(
    js: &jetstream::Context,
    link: &Link,
) -> Result<jetstream::consumer::Consumer<pull::Config>, String> {
    let name = format!("unit-{}", link.unit);
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
        let last_handled = link.book().journal.last_stream_seq();
        if let Some(last) = last_handled {
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
            link.book().consumer = Some(c.cached_info().clone());
            Ok(c)
        }
        Err(e) => match link.book().consumer.clone() {
            Some(info) => Ok(jetstream::consumer::Consumer::new(config, info, js.clone())),
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
    link: &Link,
    event: &str,
    burst: Option<&str>,
    trigger: Option<&str>,
    detail: Value,
) -> Result<(), String> {
    let e = UnitEvent {
        schema: SCHEMA,
        unit: link.unit.clone(),
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
            publish = publish.message_id(format!("{}.{event}.{key}", link.unit));
        }
    }
    js.send_publish(event_subject(&link.unit), publish)
        .await
        .map_err(|e| format!("publish event: {e}"))?
        .await
        .map_err(|e| format!("event not stored: {e}"))?;
    Ok(())
}

/// Handles one delivered trigger. Ok: its outcome is kept (recorded, joined to the burst being
/// recorded, missed, a duplicate, or malformed and ignored) and it may be acknowledged; Err: it
/// could not be kept, and must not be.
///
/// `msg` is the JetStream delivery, or None for the fast path's copy (or one read from the
/// stream on reconnecting).
async fn handle_trigger(
    js: &jetstream::Context,
    link: &Link,
    payload: &[u8],
    msg: Option<&jetstream::Message>,
) -> Result<(), String> {
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
    let config = link.server.unit().config();
    let delay_s = now_unix_ns().saturating_sub(t.issued_unix_ns) as f64 / 1e9;
    // A burst in progress that this trigger cannot join holds the unit: the trigger waits for
    // it (its window stays in the buffer for about the buffer's length), heartbeats and the
    // other path going on, rather than being refused.
    let wait_until = Instant::now() + config.buffer;
    let mut progress_sent = Instant::now();
    loop {
        let decided = {
            let _one = link.decide.lock().await;
            decide(link, &t, msg, delay_s)
        };
        match decided {
            Decision::Done(outcome) => return finish(js, link, &t, msg, outcome, delay_s).await,
            Decision::Busy(_) if Instant::now() < wait_until && !link.stopping() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if progress_sent.elapsed() > Duration::from_secs(1) {
                    progress_sent = Instant::now();
                    // Still being handled: JetStream must not deliver it again meanwhile.
                    if let Some(msg) = msg {
                        let _ = msg.ack_with(AckKind::Progress).await;
                    }
                }
            }
            Decision::Busy(why) => {
                let why = format!("refused: {why}");
                let kept = keep_missed(link, (&id, stream_seq(msg)), &why, delay_s, msg);
                return finish(js, link, &t, msg, kept, delay_s).await;
            }
        }
    }
}

/// What one look at a trigger came to.
enum Decision {
    /// Its outcome is decided (and, where it has one, in the journal).
    Done(Result<Handling, String>),
    /// A burst is being recorded that it cannot join: try again once it is sealed.
    Busy(String),
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
    msg: Option<&jetstream::Message>,
    delay_s: f64,
) -> Decision {
    let id = &t.trigger_id;
    let unit = link.server.unit();
    let config = unit.config();
    {
        let mut book = link.book();
        if book.journal.get(id).is_some() || config.output_dir.join(id).exists() {
            // One copy on each path is the design, not a duplicate: nothing to say.
            if msg.is_none() || book.fast_handled.remove(id) {
                return Decision::Done(Ok(Handling::SecondCopy));
            }
            return Decision::Done(Ok(Handling::Duplicate));
        }
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
        // Nothing buffered yet: the unit has no data clock to place a wall-clock time on.
        let why = "no frame has arrived yet: this unit has no data clock to place the trigger on";
        return Decision::Done(keep_missed(link, (id, stream_seq(msg)), why, delay_s, msg));
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
        return Decision::Done(keep_missed(link, (id, stream_seq(msg)), &why, delay_s, msg));
    }
    let req = TriggerRequest {
        at: Some(At::Ticks(at)),
        pre_s: t.pre_s,
        post_s: t.post_s,
        burst_id: Some(id.clone()),
    };
    let reply = match link.server.trigger(&req) {
        Ok(reply) => reply,
        Err(why) if link.server.burst_counts().1 => return Decision::Busy(why),
        Err(why) => {
            let why = format!("refused: {why}");
            return Decision::Done(keep_missed(link, (id, stream_seq(msg)), &why, delay_s, msg));
        }
    };
    let mut book = link.book();
    let kept = book.journal.record(
        id,
        Outcome::Recording,
        None,
        delay_s,
        stream_seq(msg),
        Some(&reply.burst_id),
    );
    if msg.is_none() {
        book.fast_handled.insert(id);
    }
    Decision::Done(match kept {
        Ok(()) => Ok(Handling::Recording(Box::new(reply))),
        Err(e) => Err(format!(
            "trigger {id} is recording, but its journal failed: {e}"
        )),
    })
}

/// Trigger `id` cannot be recorded by this unit: kept in the journal (Err if it cannot be), to
/// be published as `missed` by `finish` or, if NATS fails meanwhile, at the next beat.
fn keep_missed(
    link: &Link,
    (id, seq): (&str, Option<u64>),
    why: &str,
    delay_s: f64,
    msg: Option<&jetstream::Message>,
) -> Result<Handling, String> {
    let mut book = link.book();
    book.journal
        .record(id, Outcome::Missed, Some(why.into()), delay_s, seq, None)
        .map_err(|e| format!("trigger {id} was missed, and its journal failed: {e}"))?;
    if msg.is_none() {
        book.fast_handled.insert(id);
    }
    Ok(Handling::Missed(why.into()))
}

/// Says and publishes what became of trigger `t`, once decided.
async fn finish(
    js: &jetstream::Context,
    link: &Link,
    t: &TriggerMessage,
    msg: Option<&jetstream::Message>,
    outcome: Result<Handling, String>,
    delay_s: f64,
) -> Result<(), String> {
    let id = &t.trigger_id;
    let say = |line: String| link.say(&format!("NATS trigger {id}: {line}"));
    match outcome? {
        Handling::SecondCopy => {}
        Handling::Duplicate => {
            say("already handled: duplicate ignored".into());
            let _ = publish_event(js, link, "duplicate", Some(id), Some(id), json!({})).await;
        }
        Handling::Missed(why) => {
            say(format!("missed: {why}"));
            let _ = publish_owed(js, link).await;
        }
        Handling::Recording(reply) => {
            let w = &reply.window;
            let came = if msg.is_some() {
                "through JetStream"
            } else {
                "by the fast path"
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
                "{what} (came {came}, {delay_s:.3} s after it was sent)"
            ));
            if let Some(j) = &reply.joined {
                let detail = json!({"burst_id": reply.burst_id, "covered_start": j.covered_start,
                    "covered_end": j.covered_end, "extended_by_s": j.extended_by_s,
                    "not_covered_s": j.not_covered_s, "not_covered_why": j.not_covered_why});
                let _ = publish_event(js, link, "joined", Some(&reply.burst_id), Some(id), detail)
                    .await;
            }
            if delay_s > 2.0 {
                let why = format!("delivered {delay_s:.1} s after it was issued (this unit was not running or not connected): recording what is left of its window");
                let detail = json!({"reason": why, "delay_s": delay_s});
                let _ = publish_event(js, link, "late", Some(id), Some(id), detail).await;
            }
        }
    }
    Ok(())
}

/// How many of the newest triggers a reconnecting unit reads straight from the stream.
const CATCH_UP_TRIGGERS: u64 = 16;

/// Triggers this unit may have missed while cut off, read straight from the trigger stream (its
/// leader answers; the unit's consumer may still be waiting for its own leader, which after a
/// pause can take longer than the buffer holds the window). Only those issued since this unit
/// started and within its buffer's length: the ones it can still record; older ones come through
/// its consumer as before. Handled like the fast path's copies; best effort, within 3 s.
async fn catch_up(js: &jetstream::Context, link: &Link) {
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
    let unit = link.server.unit();
    let now = now_unix_ns();
    let started = now.saturating_sub(unit.uptime().as_nanos() as u64);
    let oldest = now.saturating_sub(unit.config().buffer.as_nanos() as u64);
    for payload in due {
        let Ok(t) = serde_json::from_slice::<TriggerMessage>(&payload) else {
            continue;
        };
        if t.issued_unix_ns < started.max(oldest)
            || link.book().journal.get(&t.trigger_id).is_some()
        {
            continue;
        }
        link.say(&format!(
            "NATS trigger {}: read from the stream on reconnecting",
            t.trigger_id
        ));
        if let Err(e) = handle_trigger(js, link, &payload, None).await {
            link.say(&format!("NATS: trigger (catch-up): {e}"));
        }
    }
}

/// The trigger stream's sequence of a JetStream delivery.
fn stream_seq(msg: Option<&jetstream::Message>) -> Option<u64> {
    msg.and_then(|m| m.info().ok()).map(|i| i.stream_sequence)
}

/// Publishes every `missed` report the journal still owes the fleet, marking each once stored.
async fn publish_owed(js: &jetstream::Context, link: &Link) -> Result<(), String> {
    let owed = link.book().journal.owed();
    for (id, h) in owed {
        let detail = json!({"reason": h.reason, "delay_s": h.delay_s});
        publish_event(js, link, "missed", None, Some(&id), detail).await?;
        link.book().journal.mark_published(&id)?;
    }
    Ok(())
}

async fn heartbeat(js: &jetstream::Context, link: &Link) -> Result<(), String> {
    let unit = link.server.unit();
    let totals = unit.totals();
    let cap = unit.buffer_capacity_frames().max(1) as f64;
    let (total, recent) = link.server.recent_bursts();
    let last = recent.last().map(|b| BurstSummary {
        burst_id: b.burst_id.clone(),
        state: b.state.clone(),
        frames: b.frames,
        lost_frames: b.lost_frames,
    });
    let status = UnitStatus {
        schema: SCHEMA,
        unit: link.unit.clone(),
        sent_unix_ns: now_unix_ns(),
        state: if link.server.burst_counts().1 {
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
        missed_triggers: link.book().journal.missed(),
        export: link.export.as_ref().map(|e| e.progress()),
    };
    js.publish(
        status_subject(&link.unit),
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
async fn publish_burst_events(js: &jetstream::Context, link: &Link) -> Result<(), String> {
    let (total, recent) = link.server.recent_bursts();
    let published = link.published.load(Ordering::Relaxed);
    let new = (total - published).min(recent.len() as u64) as usize;
    for b in &recent[recent.len() - new..] {
        let detail = serde_json::to_value(b).expect("outcomes serialise");
        let id = &b.burst_id;
        publish_event(js, link, &b.state, Some(id), Some(id), detail).await?;
        link.published.fetch_add(1, Ordering::Relaxed);
    }
    link.published.store(total, Ordering::Relaxed);
    if let Some(e) = &link.export {
        let exported = e.take_exported();
        link.book().exported_unpublished.extend(exported);
    }
    loop {
        let next = link.book().exported_unpublished.first().cloned();
        let Some(id) = next else { break };
        publish_event(js, link, "exported", Some(&id), Some(&id), json!({})).await?;
        link.book().exported_unpublished.remove(0);
    }
    Ok(())
}
