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
use snbuf_unit::protocol::{At, TriggerRequest};

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
        return missed(js, st, &id, why.into(), delay_s).await;
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
        return missed(js, st, &id, why, delay_s).await;
    }
    let req = TriggerRequest {
        at: Some(At::Ticks(at)),
        pre_s: t.pre_s,
        post_s: t.post_s,
        burst_id: Some(id.clone()),
    };
    match st.server.trigger(&req) {
        Ok(reply) => {
            st.accepted.insert(id.clone());
            let w = &reply.window;
            report(
                st,
                format!(
                    "recording window [{}, {}) ticks, {:.3} s before to {:.3} s after {}",
                    w.window_start_timestamp,
                    w.window_end_timestamp,
                    w.pre_s.unwrap_or(0.0),
                    w.post_s.unwrap_or(0.0),
                    w.trigger_timestamp
                ),
            );
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
        }
        Err(why) => {
            report(st, format!("refused: {why}"));
            let _ = publish_event(js, st, "refused", None, Some(&id), json!({"reason": why})).await;
        }
    }
}

/// Trigger `id` cannot be recorded by this unit: counted, logged and published as `missed`.
async fn missed(js: &jetstream::Context, st: &LinkState, id: &str, why: String, delay_s: f64) {
    st.missed.fetch_add(1, Ordering::Relaxed);
    (st.log)(&format!("NATS trigger {id}: missed: {why}"));
    let detail = json!({"reason": why, "delay_s": delay_s});
    let _ = publish_event(js, st, "missed", None, Some(id), detail).await;
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
