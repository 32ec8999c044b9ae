//! A unit's link to the fleet (`snbuf serve --nats URL --unit ID`): it takes triggers from
//! JetStream, reports a heartbeat into the status stream every second, and publishes burst
//! events. Recording never waits for it: it runs on its own thread, talks to the unit through the
//! same requests as the control socket, and when NATS is unreachable the unit records locally
//! while the client library reconnects in the background.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use futures::StreamExt;
use serde_json::{json, Value};
use snbuf_unit::control::Server;

use crate::schema::*;
use snbuf_units::now_unix_ns;

/// How to reach NATS.
#[derive(Clone, Debug)]
pub struct NatsOptions {
    pub url: String,
    /// A `.creds` file (JWT and NKey), for servers with decentralised auth.
    pub creds: Option<PathBuf>,
    /// A CA certificate to trust for TLS (`tls://` URLs, or servers that require TLS).
    pub ca: Option<PathBuf>,
}

impl NatsOptions {
    pub(crate) async fn connect_options(&self) -> std::io::Result<async_nats::ConnectOptions> {
        let mut o = match &self.creds {
            Some(c) => async_nats::ConnectOptions::with_credentials_file(c).await?,
            None => async_nats::ConnectOptions::new(),
        };
        if let Some(ca) = &self.ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        Ok(o.connection_timeout(Duration::from_secs(3)))
    }
}

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
    /// reached at once (the link keeps trying; the unit records locally meanwhile).
    pub fn start(
        opts: NatsOptions,
        unit_id: String,
        server: Arc<Server>,
        export: Option<Arc<dyn ExportReporter>>,
        log: Log,
    ) -> std::io::Result<(UnitLink, Option<String>)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // One quick attempt, for a clear message at start.
        let first = rt.block_on(async {
            let o = opts.connect_options().await.map_err(|e| e.to_string())?;
            async_nats::connect_with_options(&opts.url, o)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let unreachable = first.err().map(|e| {
            format!(
                "NATS at {} is unreachable ({e}); recording locally, retrying in the background",
                opts.url
            )
        });
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("snbuf-nats".into())
            .spawn(move || {
                rt.block_on(run(opts, unit_id, server, export, log, stop2));
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
    /// Triggers this unit accepted (a second delivery is a duplicate).
    accepted: HashSet<String>,
    missed: AtomicU64,
    /// Bursts already published as events.
    published: u64,
    export: Option<Arc<dyn ExportReporter>>,
    /// Exported bursts collected but not yet published (kept across a lost connection).
    exported_unpublished: Vec<String>,
}

async fn run(
    opts: NatsOptions,
    unit: String,
    server: Arc<Server>,
    export: Option<Arc<dyn ExportReporter>>,
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
        accepted: HashSet::new(),
        missed: AtomicU64::new(0),
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
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// One connected session: set up streams, bucket and consumer, then serve until an error.
async fn session(opts: &NatsOptions, st: &mut LinkState, stop: &AtomicBool) -> Result<(), String> {
    let o = opts.connect_options().await.map_err(|e| e.to_string())?;
    let client = async_nats::connect_with_options(&opts.url, o)
        .await
        .map_err(|e| format!("connect {}: {e}", opts.url))?;
    let js = jetstream::new(client);
    let triggers = ensure_layout(&js).await?;
    let consumer: jetstream::consumer::Consumer<pull::Config> = triggers
        .get_or_create_consumer(
            &format!("unit-{}", st.unit),
            pull::Config {
                durable_name: Some(format!("unit-{}", st.unit)),
                filter_subject: TRIGGER_SUBJECT.into(),
                // A new unit starts with the next trigger; an existing one resumes where it was.
                deliver_policy: DeliverPolicy::New,
                ack_policy: AckPolicy::Explicit,
                ack_wait: Duration::from_secs(30),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("trigger consumer: {e}"))?;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("trigger subscription: {e}"))?;
    (st.log)(&format!(
        "NATS: connected to {} as unit {}",
        opts.url, st.unit
    ));
    let mut beat = tokio::time::interval(Duration::from_millis(HEARTBEAT_MS));
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        tokio::select! {
            m = messages.next() => match m {
                Some(Ok(msg)) => {
                    handle_trigger(&js, st, &msg.payload).await;
                    // Handled (recorded, refused, or ignored as malformed): never redelivered.
                    if let Err(e) = msg.ack().await {
                        (st.log)(&format!("NATS: ack: {e}"));
                    }
                }
                Some(Err(e)) => return Err(format!("trigger stream: {e}")),
                None => return Err("trigger stream ended".into()),
            },
            _ = beat.tick() => {
                heartbeat(&js, st).await?;
                publish_burst_events(&js, st).await?;
            }
        }
    }
}

/// The trigger, event and status streams, created if missing. Returns the trigger stream.
pub(crate) async fn ensure_layout(
    js: &jetstream::Context,
) -> Result<jetstream::stream::Stream, String> {
    let triggers = js
        .get_or_create_stream(jetstream::stream::Config {
            name: TRIGGER_STREAM.into(),
            subjects: vec![TRIGGER_SUBJECT.into()],
            // A trigger older than a day cannot reach any buffer.
            max_age: Duration::from_secs(24 * 3600),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("stream {TRIGGER_STREAM}: {e}"))?;
    js.get_or_create_stream(jetstream::stream::Config {
        name: EVENT_STREAM.into(),
        subjects: vec!["snbuf.unit.*.event".into()],
        max_age: Duration::from_secs(30 * 24 * 3600),
        ..Default::default()
    })
    .await
    .map_err(|e| format!("stream {EVENT_STREAM}: {e}"))?;
    js.get_or_create_stream(jetstream::stream::Config {
        name: STATUS_STREAM.into(),
        subjects: vec![STATUS_SUBJECTS.into()],
        // Only each unit's latest heartbeat matters.
        max_messages_per_subject: 1,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("stream {STATUS_STREAM}: {e}"))?;
    Ok(triggers)
}

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
    js.publish(event_subject(&st.unit), body.into())
        .await
        .map_err(|e| format!("publish event: {e}"))?
        .await
        .map_err(|e| format!("event not stored: {e}"))?;
    Ok(())
}

async fn handle_trigger(js: &jetstream::Context, st: &mut LinkState, payload: &[u8]) {
    let t: TriggerMessage = match serde_json::from_slice(payload) {
        Ok(t) => t,
        Err(e) => {
            (st.log)(&format!(
                "NATS: malformed trigger ignored ({e}): {}",
                String::from_utf8_lossy(&payload[..payload.len().min(200)])
            ));
            return;
        }
    };
    let id = t.trigger_id.clone();
    let report = |st: &LinkState, line: String| (st.log)(&format!("NATS trigger {id}: {line}"));
    let unit = st.server.unit();
    let config = unit.config();
    if st.accepted.contains(&id) || config.output_dir.join(&id).exists() {
        report(st, "already handled: duplicate ignored".into());
        let _ = publish_event(js, st, "duplicate", Some(&id), Some(&id), json!({})).await;
        return;
    }
    // Wall-clock time to this unit's detector ticks (the emulated clock counts ticks_per_s from
    // the Unix epoch: see `Unit::start`).
    let ticks_per_s = config.ticks_per_s();
    let to_ticks = |ns: u64| (ns as f64 / 1e9 * ticks_per_s) as u64;
    let at = match (t.at_ticks, t.at_unix_ns) {
        (Some(ticks), _) => ticks,
        (None, Some(ns)) => to_ticks(ns),
        (None, None) => to_ticks(t.issued_unix_ns),
    };
    let delay_s = now_unix_ns().saturating_sub(t.issued_unix_ns) as f64 / 1e9;
    // Has the whole window already left this unit's buffer (the unit was down)?
    let pre = t.pre_s.unwrap_or(config.pre.as_secs_f64());
    let post = t.post_s.unwrap_or(config.post.as_secs_f64());
    let ticks_per_frame = config.frame_type.ticks_per_frame();
    let fill = unit
        .totals()
        .first()
        .map(|l| l.buffer_fill_frames)
        .unwrap_or(0);
    let oldest = match unit.newest_timestamp() {
        Some(newest) => newest.saturating_sub(fill * ticks_per_frame),
        // Nothing buffered yet: a unit that has just started gets the triggers it missed before
        // its first frame, and whatever ended before now is gone (taking 0 here had such a
        // trigger go on to the recorder as if its window could still be in the buffer).
        None => to_ticks(now_unix_ns()),
    };
    let window_end = at.saturating_add((post * ticks_per_s) as u64);
    if window_end < oldest {
        st.missed.fetch_add(1, Ordering::Relaxed);
        let why = format!(
            "delivered {delay_s:.1} s after it was issued (this unit was not running or not connected): its window ends before the oldest frame in the {:.0} s buffer",
            config.buffer.as_secs_f64()
        );
        report(st, format!("missed: {why}"));
        let _ = publish_event(
            js,
            st,
            "missed",
            None,
            Some(&id),
            json!({"reason": why, "delay_s": delay_s}),
        )
        .await;
        return;
    }
    let mut req = json!({"cmd": "trigger", "at": at, "burst_id": id, "pre_s": pre, "post_s": post});
    if t.pre_s.is_none() {
        req.as_object_mut().expect("object").remove("pre_s");
    }
    if t.post_s.is_none() {
        req.as_object_mut().expect("object").remove("post_s");
    }
    let log = st.log.clone();
    let reply = st.server.handle(&req, &mut |l| log(l));
    if reply["ok"] == true {
        st.accepted.insert(id.clone());
        report(st, format!("recording window {}", reply["window"]));
        if delay_s > 2.0 {
            let _ = publish_event(
                js,
                st,
                "late",
                Some(&id),
                Some(&id),
                json!({"reason": format!("delivered {delay_s:.1} s after it was issued (this unit was not running or not connected): recording what is left of its window"), "delay_s": delay_s}),
            )
            .await;
        }
    } else {
        let why = reply["error"].as_str().unwrap_or("refused").to_string();
        report(st, format!("refused: {why}"));
        let _ = publish_event(js, st, "refused", None, Some(&id), json!({"reason": why})).await;
    }
}

async fn heartbeat(js: &jetstream::Context, st: &LinkState) -> Result<(), String> {
    let unit = st.server.unit();
    let totals = unit.totals();
    let cap = unit.buffer_capacity_frames().max(1) as f64;
    let (total, recent) = st.server.recent_bursts();
    let last = recent.last().map(|(id, r)| BurstSummary {
        burst_id: id.clone(),
        state: r["state"].as_str().unwrap_or("unknown").into(),
        frames: r["frames"].as_u64(),
        lost_frames: r["lost_frames"].as_u64(),
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
        missed_triggers: st.missed.load(Ordering::Relaxed),
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
    for (id, result) in &recent[recent.len() - new..] {
        let state = result["state"].as_str().unwrap_or("unknown").to_string();
        publish_event(js, st, &state, Some(id), Some(id), result.clone()).await?;
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
