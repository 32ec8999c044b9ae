//! How fast a trigger reaches a fleet: `snbuf fleet bench` starts many lightweight units (each
//! its own NATS connection and durable JetStream consumer, exactly as a `serve` unit takes
//! triggers, but with no data behind it), broadcasts triggers, and records per unit and trigger
//! the time from sending to receipt. On one machine sender and receivers share a clock.
//!
//! The bench uses its own subject and stream (`snbuf.bench.trigger`, `SNBUF_BENCH_TRIGGERS`),
//! removed afterwards, so that real units never see its triggers.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, consumer::DeliverPolicy};
use futures::StreamExt;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::FleetError;
use crate::connect::NatsOptions;
use crate::schema::{TriggerMessage, SCHEMA};
use snbuf_quantity::now_unix_ns;

const SUBJECT: &str = "snbuf.bench.trigger";
const STREAM: &str = "SNBUF_BENCH_TRIGGERS";

#[derive(Clone, Debug, Serialize)]
pub struct DeliveryReport {
    pub units: usize,
    pub triggers: usize,
    /// Deliveries seen (units x triggers when none was lost).
    pub delivered: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

/// `units` units subscribed, then `triggers` triggers published `interval` apart, each unit's
/// delivery delays collected: on one runtime, in the order they run.
pub fn run(
    opts: &NatsOptions,
    units: usize,
    triggers: usize,
    interval: Duration,
) -> Result<DeliveryReport, FleetError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let nats = crate::client::nats_error(opts);
        let js = crate::client::connect(opts).await?;
        let _ = js.delete_stream(STREAM).await;
        js.create_stream(jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec![SUBJECT.into()],
            ..Default::default()
        })
        .await
        .map_err(|e| nats(format!("stream {STREAM}: {e}")))?;

        // The units: connected and subscribed before the first trigger.
        let hist = Arc::new(tokio::sync::Mutex::new(
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds"),
        ));
        let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(units);
        let mut tasks = Vec::new();
        for i in 0..units {
            let opts = opts.clone();
            let hist = hist.clone();
            let ready = ready_tx.clone();
            tasks.push(tokio::spawn(bench_unit(opts, i, triggers, hist, ready)));
        }
        drop(ready_tx);
        let mut subscribed = 0;
        while subscribed < units {
            match tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await {
                Ok(Some(())) => subscribed += 1,
                _ => {
                    return Err(nats(format!(
                        "only {subscribed} of {units} units subscribed"
                    )))
                }
            }
        }
        // The triggers, paced; each stored by JetStream before the next.
        let mut tick = tokio::time::interval(interval);
        for k in 0..triggers {
            tick.tick().await;
            let t = TriggerMessage {
                schema: SCHEMA,
                trigger_id: format!("bench-{k}"),
                at_unix_ns: None,
                at_ticks: None,
                pre_s: None,
                post_s: None,
                issued_unix_ns: now_unix_ns(),
            };
            js.publish(SUBJECT, serde_json::to_vec(&t).expect("serialises").into())
                .await
                .map_err(|e| nats(format!("publish: {e}")))?
                .await
                .map_err(|e| nats(format!("not stored: {e}")))?;
        }
        let mut delivered = 0u64;
        for t in tasks {
            delivered += t.await.ok().flatten().unwrap_or(0) as u64;
        }
        let _ = js.delete_stream(STREAM).await;
        let h = hist.lock().await;
        let ms = |ns: u64| ns as f64 / 1e6;
        Ok(DeliveryReport {
            units,
            triggers,
            delivered,
            p50_ms: ms(h.value_at_quantile(0.5)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
            mean_ms: h.mean() / 1e6,
        })
    })
}

/// Unit `i` of the bench: subscribed (said on `ready`), then the delay of each of `triggers`
/// triggers recorded in `hist`; how many it received (None: it could not subscribe, or one
/// did not come within 30 s).
async fn bench_unit(
    opts: NatsOptions,
    i: usize,
    triggers: usize,
    hist: Arc<tokio::sync::Mutex<Histogram<u64>>>,
    ready: tokio::sync::mpsc::Sender<()>,
) -> Option<usize> {
    let c = opts.connect().await.ok()?;
    let js = jetstream::new(c);
    let stream = js.get_stream(STREAM).await.ok()?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(format!("bench-unit-{i}")),
            filter_subject: SUBJECT.into(),
            deliver_policy: DeliverPolicy::New,
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .ok()?;
    let mut msgs = consumer.messages().await.ok()?;
    ready.send(()).await.ok()?;
    let mut got = 0;
    while got < triggers {
        let m = tokio::time::timeout(Duration::from_secs(30), msgs.next())
            .await
            .ok()??
            .ok()?;
        let now = now_unix_ns();
        if let Ok(t) = serde_json::from_slice::<TriggerMessage>(&m.payload) {
            let ns = now.saturating_sub(t.issued_unix_ns).max(1);
            let _ = hist.lock().await.record(ns);
        }
        let _ = m.ack().await;
        got += 1;
    }
    Some(got)
}
