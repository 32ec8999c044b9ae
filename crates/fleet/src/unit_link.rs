//! A unit's link to the fleet (`snbuf serve --nats URL --unit ID`): it takes triggers from
//! JetStream, reports a heartbeat into the status stream every second, and publishes burst
//! events. Recording never waits for it: it runs on its own thread, talks to the unit through the
//! same requests as the control socket, and when NATS is unreachable the unit records locally
//! while the client library reconnects in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use futures::StreamExt;
use snbuf_unit::desk::TriggerDesk;

use crate::connect::{NatsOptions, RETRY_DELAY};
use crate::journal::{Route, TriggerJournal};
use crate::link_state::FastHandled;
use crate::link_state::{publish_event, publish_owed, Book, Link};
use crate::schema::*;
use crate::trigger_handling::handle_trigger;
use snbuf_quantity::now_unix_ns;

pub use crate::link_state::ExportReporter;

pub struct UnitLink {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UnitLink {
    /// Starts the link on its own thread. Returns it, and an error line if NATS could not be
    /// reached at once (the link keeps trying; the unit records locally meanwhile). Fails only
    /// when the unit's trigger journal cannot be read or created (the file and its directory
    /// synced).
    pub fn start(
        opts: NatsOptions,
        unit_id: String,
        desk: Arc<TriggerDesk>,
        export: Option<Arc<dyn ExportReporter>>,
    ) -> std::io::Result<(UnitLink, Option<String>)> {
        let journal = TriggerJournal::open(&desk.unit().config().output_dir)
            .map_err(std::io::Error::other)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let stop = Arc::new(AtomicBool::new(false));
        let link = Arc::new(Link {
            unit: unit_id,
            // Every burst the server holds is announced: before any trigger, those are the
            // interrupted bursts it recovered at its start.
            published: std::sync::atomic::AtomicU64::new(0),
            desk,
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
        tokio::time::sleep(RETRY_DELAY).await;
        client = opts.connect_notifying(Some(caught_up.clone())).await.ok();
    }
    let Some(client) = client else {
        consumer.abort();
        return;
    };
    let mut js = jetstream::new(client.clone());
    js.set_timeout(REQUEST_TIMEOUT);
    // The fast path on a connection to each server given, each kept to its server: a copy
    // published anywhere in the cluster reaches the unit through every server that is up, so a
    // server that dies, stops answering or is cut off costs nothing (the copies that come through
    // the others are the same trigger, found in the journal). One URL: one connection, which
    // follows the servers it hears of.
    let mut fast: Vec<_> = opts
        .addrs()
        .into_iter()
        .map(|server| tokio::spawn(fast_path(opts.clone(), server, js.clone(), link.clone())))
        .collect();
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
    fast.extend([consumer, beats, catch_ups]);
    for task in fast {
        task.abort();
    }
}

/// The fast path: every trigger published on plain NATS, handled the moment it arrives.
async fn fast_path(
    opts: NatsOptions,
    server: async_nats::ServerAddr,
    js: jetstream::Context,
    link: Arc<Link>,
) {
    let only = opts.servers.len() > 1;
    let mut said = false;
    while !link.stopping() {
        let reconnected = Arc::new(tokio::sync::Notify::new());
        let one = opts.connect_one(server.clone(), Some(reconnected.clone()), only);
        let client = match tokio::time::timeout(crate::connect::CONNECT_TIMEOUT, one).await {
            Ok(Ok(c)) => c,
            failed => {
                if !said {
                    let why = match failed {
                        Ok(Err(e)) => e,
                        _ => "no answer".into(),
                    };
                    link.say(&format!(
                        "NATS: fast path via {}: {why}; retrying",
                        crate::connect::server_name(&server)
                    ));
                    said = true;
                }
                tokio::time::sleep(RETRY_DELAY).await;
                continue;
            }
        };
        said = false;
        // On every (re)connection of this server's connection: the triggers issued while it
        // was away, read from the stream through this server, which has just answered. The
        // run's connection and the consumer may still be looking for a server that is up.
        let _catch_ups = AbortOnDrop(tokio::spawn({
            let mut js = jetstream::new(client.clone());
            js.set_timeout(REQUEST_TIMEOUT);
            let link = link.clone();
            async move {
                loop {
                    reconnected.notified().await;
                    catch_up(&js, &link).await;
                }
            }
        }));
        let mut sub = match client.subscribe(TRIGGER_FAST_SUBJECT).await {
            Ok(s) => s,
            Err(e) => {
                link.say(&format!(
                    "NATS: subscribe {TRIGGER_FAST_SUBJECT}: {e}; retrying"
                ));
                tokio::time::sleep(RETRY_DELAY).await;
                continue;
            }
        };
        while let Some(m) = sub.next().await {
            // Whichever copy comes first is handled, the other is found in the journal. Nothing
            // to acknowledge; a copy that could not be kept comes again through JetStream.
            let (js, link) = (js.clone(), link.clone());
            tokio::spawn(async move {
                if let Err(e) = handle_trigger(&js, &link, &m.payload, None, Route::Fast).await {
                    link.say(&format!("NATS: trigger (fast path): {e}"));
                }
            });
        }
        link.say("NATS: the fast trigger subscription ended; subscribing again");
        tokio::time::sleep(RETRY_DELAY).await;
    }
}

/// Aborts its task when dropped: a task tied to one connection ends with it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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
    // Said once until it changes: the session is tried again five times a second.
    let mut last_said: Option<String> = None;
    while !link.stopping() {
        match consumer_session(&opts, &link, &mut last_said).await {
            Ok(()) => return,
            Err(e) => {
                if (connected_once || !e.contains("connect")) && last_said.as_ref() != Some(&e) {
                    link.say(&format!("NATS: {e}; retrying"));
                    last_said = Some(e);
                }
                connected_once = true;
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}

/// One session of the consumer: streams (checked once per run) and consumer, then its triggers
/// until the subscription fails.
async fn consumer_session(
    opts: &NatsOptions,
    link: &Arc<Link>,
    last_said: &mut Option<String>,
) -> Result<(), String> {
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
    // A session was made: the next failure is news, whatever the last one said.
    *last_said = None;
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
                    match handle_trigger(&js, &link, &msg.payload, Some(&msg), Route::JetStream)
                        .await
                    {
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
        let mut config = config.clone();
        config.deliver_policy = resume_policy(js, link).await?;
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

/// Where the unit's trigger consumer starts when it is made anew (a new unit, one killed before
/// its first consumer existed, or a consumer the cluster lost). A unit JetStream delivered to
/// before starts right after the last trigger its journal holds, so none sent meanwhile is
/// skipped (the few handled by the fast path since come again, as duplicates). A unit it never
/// delivered to, or whose stream is younger than that sequence (deleted and made again), starts
/// from when the unit joined the fleet: the triggers sent while it was down come, and what it
/// cannot record of them is reported missed, not never heard of (those it took by the fast path
/// come again too, as duplicates: a stream's worth at most, `layout::TRIGGER_MAX_AGE`).
async fn resume_policy(js: &jetstream::Context, link: &Link) -> Result<DeliverPolicy, String> {
    let (last_handled, joined) = {
        let book = link.book();
        (
            book.journal.last_stream_seq(),
            book.journal.joined_unix_ns(),
        )
    };
    let stored = match last_handled {
        Some(_) => Some(
            js.get_stream(TRIGGER_STREAM)
                .await
                .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?
                .info()
                .await
                .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?
                .state
                .last_sequence,
        ),
        None => None,
    };
    let policy = match (last_handled, stored, joined) {
        (Some(last), Some(stored), _) if last < stored => DeliverPolicy::ByStartSequence {
            start_sequence: last + 1,
        },
        // Nothing stored since the last it handled.
        (Some(last), Some(stored), _) if last == stored => DeliverPolicy::New,
        (_, _, Some(joined)) => DeliverPolicy::ByStartTime {
            start_time: time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(joined))
                .map_err(|e| format!("the journal's join time {joined} ns: {e}"))?,
        },
        _ => DeliverPolicy::New,
    };
    Ok(policy)
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

/// How many of the newest triggers a reconnecting unit reads straight from the stream.
const CATCH_UP_TRIGGERS: u64 = 16;

/// Triggers this unit may have missed while cut off, read straight from the trigger stream (its
/// leader answers; the unit's consumer may still be waiting for its own leader, which after a
/// pause can take longer than the buffer holds the window). Only those issued since this unit
/// started and within its buffer's length: the ones it can still record; older ones come through
/// its consumer as before. Handled like the fast path's copies; best effort, within 3 s.
async fn catch_up(js: &jetstream::Context, link: &Arc<Link>) {
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
    let unit = link.desk.unit();
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
        // Each on a task of its own, as on the live paths: one that waits for a burst in
        // progress holds neither the others nor the consumer's session.
        let (js, link) = (js.clone(), link.clone());
        tokio::spawn(async move {
            if let Err(e) = handle_trigger(&js, &link, &payload, None, Route::CatchUp).await {
                link.say(&format!("NATS: trigger (catch-up): {e}"));
            }
        });
    }
}

async fn heartbeat(js: &jetstream::Context, link: &Link) -> Result<(), String> {
    let missed = link.book().journal.missed();
    let status = Heartbeat::of(
        &link.unit,
        &link.desk.status(),
        missed,
        link.export.as_ref().map(|e| e.progress()),
    );
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
    let (total, recent) = link.desk.recent_bursts();
    let published = link.published.load(Ordering::Relaxed);
    let new = (total - published).min(recent.len() as u64) as usize;
    for b in &recent[recent.len() - new..] {
        let id = &b.burst_id;
        let kind = EventKind::of_burst(b.clone());
        publish_event(js, link, kind, Some(id), Some(id)).await?;
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
        publish_event(js, link, EventKind::Exported {}, Some(&id), Some(&id)).await?;
        link.book().exported_unpublished.remove(0);
    }
    Ok(())
}
