//! Prometheus metrics of a running unit (`snbuf serve --metrics 127.0.0.1:9464`): the text
//! exposition format over plain HTTP, `GET /metrics`. Every metric is listed with its meaning in
//! docs/METRICS.md.
//!
//! Counters (`_total`) only grow over the unit's run, across bursts; gauges are the value now.
//! The endpoint only reads: it cannot trigger or change anything. It binds where it is told
//! (loopback in every example), answers one request per connection, and bounds what it reads.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use snbuf_readout::udp::IngestSnapshot;

use crate::desk::TriggerDesk;

/// Counter (`_total`, only grows) or gauge (the value now).
#[derive(Clone, Copy)]
enum MetricKind {
    Counter,
    Gauge,
}

impl MetricKind {
    fn word(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
        }
    }
}

/// What a per-link family reads: the link's counters, with the frame size and the buffer's
/// capacity; None leaves the link out (nothing measured yet).
struct LinkView<'a> {
    counters: &'a crate::counters::LinkCounters,
    frame_bytes: u64,
    capacity_frames: u64,
}

/// A family with one sample per link: name, kind, help, and how to read it.
type LinkFamily = (
    &'static str,
    MetricKind,
    &'static str,
    fn(&LinkView) -> Option<f64>,
);

#[rustfmt::skip]
const LINK_FAMILIES: &[LinkFamily] = &[
    ("snbuf_link_input_frames_total", MetricKind::Counter,
     "Frames the link produced into its latency buffer.",
     |l| Some(l.counters.frames_in as f64)),
    ("snbuf_link_input_bytes_total", MetricKind::Counter,
     "Bytes the link produced into its latency buffer.",
     |l| Some((l.counters.frames_in * l.frame_bytes) as f64)),
    ("snbuf_link_output_frames_total", MetricKind::Counter,
     "Frames of trigger windows made durable, over all bursts.",
     |l| Some(l.counters.durable_frames as f64)),
    ("snbuf_link_output_bytes_total", MetricKind::Counter,
     "Bytes of trigger windows made durable, over all bursts.",
     |l| Some((l.counters.durable_frames * l.frame_bytes) as f64)),
    ("snbuf_link_lost_frames_total", MetricKind::Counter,
     "Frames of trigger windows lost (overwritten before written, missing, or after a failure).",
     |l| Some(l.counters.lost_frames as f64)),
    ("snbuf_link_buffer_fill_frames", MetricKind::Gauge,
     "Frames the latency buffer holds now.",
     |l| Some(l.counters.buffer_fill_frames as f64)),
    ("snbuf_link_buffer_capacity_frames", MetricKind::Gauge,
     "Frames the latency buffer holds when full.",
     |l| Some(l.capacity_frames as f64)),
    ("snbuf_link_backlog_frames", MetricKind::Gauge,
     "Frames of the window being recorded that are produced but not yet durable.",
     |l| Some(l.counters.backlog_frames as f64)),
    ("snbuf_link_durable_timestamp_ticks", MetricKind::Gauge,
     "Detector timestamp (ticks) of the newest durable frame of the newest burst: the durable watermark.",
     |l| l.counters.durable_until_timestamp.map(|t| t as f64)),
    ("snbuf_link_failed", MetricKind::Gauge,
     "1 if the link failed in the burst being recorded.",
     |l| Some(l.counters.failed as u8 as f64)),
];

/// A family of a network link's ingest counters (shown only when the links come from the
/// network).
type IngestFamily = (&'static str, &'static str, fn(&IngestSnapshot) -> u64);

#[rustfmt::skip]
const INGEST_FAMILIES: &[IngestFamily] = &[
    ("snbuf_link_ingest_frames_total",
     "Frames received from the network and kept, per link.",
     |g| g.frames),
    ("snbuf_link_ingest_kernel_drops_total",
     "Drops the kernel counted on the link's socket (receive buffer full): datagrams, or with GRO whole coalesced buffers; the frames lost are snbuf_link_ingest_missing_frames_total.",
     |g| g.kernel_drops),
    ("snbuf_link_ingest_missing_frames_total",
     "Frames missing from what the link sent, by its timestamps.",
     |g| g.timestamp_gap_frames),
    ("snbuf_link_ingest_sequence_gap_frames_total",
     "Frames missing from what the link sent, by its DAQEthHeader sequence numbers.",
     |g| g.sequence_gap_frames),
    ("snbuf_link_ingest_receives_total",
     "Messages received for the link (datagrams, or coalesced buffers with GRO): frames / receives is how many frames each carried (more than 1 with GRO).",
     |g| g.receives),
    ("snbuf_link_ingest_receive_calls_total",
     "System calls that received the link's messages (one, or several full coalesced buffers): frames / receive_calls is how many frames each crossing into the kernel carried.",
     |g| g.receive_calls),
    ("snbuf_link_ingest_rerouted_frames_total",
     "The link's frames the kernel queued on another link's socket and snbuf moved (BPF routing fell back to hash).",
     |g| g.rerouted),
];

/// The reasons a received datagram is dropped, each a label of
/// `snbuf_link_ingest_dropped_datagrams_total`.
type DropReason = (&'static str, fn(&IngestSnapshot) -> u64);

const DROP_REASONS: &[DropReason] = &[
    ("implausible_timestamp", |g| g.dropped.implausible_timestamp),
    ("out_of_order", |g| g.dropped.out_of_order),
    ("short", |g| g.dropped.short),
    ("long", |g| g.dropped.long),
    ("bad_version", |g| g.dropped.bad_version),
    ("unknown_stream", |g| g.dropped.unknown_stream),
];

/// A family of a link's measured clock and rate; None until measured.
type RateFamily = (
    &'static str,
    &'static str,
    fn(&crate::link_rates::LinkRate) -> Option<f64>,
);

#[rustfmt::skip]
const RATE_FAMILIES: &[RateFamily] = &[
    ("snbuf_link_clock_ratio",
     "The link's data clock over the frame type's: detector ticks its newest frame advanced per wall-clock second (last few seconds), over the clock's Hz. 1 for a detector on its own clock.",
     |r| r.clock_ratio),
    ("snbuf_link_rate_ratio",
     "Bytes a second the link brings (last few seconds) over the rate the unit was configured for (which sized its buffer).",
     |r| r.rate_ratio),
    ("snbuf_link_buffer_span_seconds",
     "Detector seconds from the oldest to the newest frame the link's latency buffer holds: how far back a trigger can reach.",
     |r| r.buffer_span_s),
];

/// A family of the unit as a whole: one sample, or one per label.
type UnitFamily = (
    &'static str,
    MetricKind,
    &'static str,
    fn(&TriggerDesk) -> Vec<(String, f64)>,
);

#[rustfmt::skip]
const UNIT_FAMILIES: &[UnitFamily] = &[
    ("snbuf_window_not_buffered_seconds_total", MetricKind::Counter,
     "Seconds of accepted trigger windows that the latency buffers no longer held when the trigger came (recorded as lost).",
     |s| vec![(String::new(), s.not_buffered_seconds_total())]),
    ("snbuf_triggers_refused_total", MetricKind::Counter,
     "Triggers refused, over the socket and the fleet alike (each with its reason in the log, and in the fleet a missed event): a window too long, gone, far ahead or without room, a bad id, a busy or stopping unit.",
     |s| vec![(String::new(), s.refused_total() as f64)]),
    ("snbuf_bursts_total", MetricKind::Counter,
     "Bursts finished, by final state (sealed, failed, error).",
     |s| s.bursts_by_state().into_iter().map(|(state, n)| (format!("{{state=\"{}\"}}", state.name()), n as f64)).collect()),
    ("snbuf_recording", MetricKind::Gauge,
     "1 while a burst is being recorded.",
     |s| vec![(String::new(), s.is_recording() as u8 as f64)]),
    ("snbuf_uptime_seconds", MetricKind::Gauge,
     "Seconds since the unit started.",
     |s| vec![(String::new(), s.unit().uptime().as_secs_f64())]),
];

/// One family in the exposition format: HELP, TYPE, then its samples (`labels value`).
fn family(out: &mut String, name: &str, kind: MetricKind, help: &str, samples: Vec<(String, f64)>) {
    debug_assert!(
        name.starts_with("snbuf_"),
        "{name}: every family is snbuf's"
    );
    debug_assert!(
        matches!(kind, MetricKind::Gauge) || name.ends_with("_total"),
        "{name}: a counter's name ends in _total"
    );
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {}", kind.word());
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{labels} {v}");
    }
}

fn link_label(link: u32) -> String {
    format!("{{link=\"{link}\"}}")
}

/// The metrics text for the unit of `desk` now: the families of the tables above, in their order.
pub fn render(desk: &TriggerDesk) -> String {
    let unit = desk.unit();
    let links = unit.totals();
    let views: Vec<LinkView> = links
        .iter()
        .map(|counters| LinkView {
            counters,
            frame_bytes: unit.config().frame_type.frame_bytes() as u64,
            capacity_frames: unit.buffer_capacity_frames(),
        })
        .collect();
    debug_assert_eq!(views.len(), unit.config().links as usize, "a view per link");
    let mut out = String::new();
    for (name, kind, help, read) in LINK_FAMILIES {
        let samples = views
            .iter()
            .filter_map(|l| read(l).map(|v| (link_label(l.counters.link), v)))
            .collect();
        family(&mut out, name, *kind, help, samples);
    }
    let ingest: Vec<(u32, IngestSnapshot)> = links
        .iter()
        .filter_map(|l| l.ingest.map(|g| (l.link, g)))
        .collect();
    if !ingest.is_empty() {
        for (name, help, read) in INGEST_FAMILIES {
            let samples = ingest
                .iter()
                .map(|(link, g)| (link_label(*link), read(g) as f64))
                .collect();
            family(&mut out, name, MetricKind::Counter, help, samples);
        }
        let samples = ingest
            .iter()
            .flat_map(|(link, g)| {
                DROP_REASONS.iter().map(move |(reason, read)| {
                    (
                        format!("{{link=\"{link}\",reason=\"{reason}\"}}"),
                        read(g) as f64,
                    )
                })
            })
            .collect();
        family(
            &mut out,
            "snbuf_link_ingest_dropped_datagrams_total",
            MetricKind::Counter,
            "Datagrams received and dropped, by reason: out of order, shorter or longer than a frame, another header version, a stream no link takes.",
            samples,
        );
    }
    let rates = unit.link_rates();
    debug_assert_eq!(rates.len(), links.len(), "a measurement per link");
    for (name, help, read) in RATE_FAMILIES {
        let samples = rates
            .iter()
            .filter_map(|r| read(r).map(|v| (link_label(r.link), v)))
            .collect();
        family(&mut out, name, MetricKind::Gauge, help, samples);
    }
    for (name, kind, help, read) in UNIT_FAMILIES {
        family(&mut out, name, *kind, help, read(desk));
    }
    out
}

/// The largest request read: a scrape request is a few hundred bytes.
const MAX_REQUEST_BYTES: usize = 8 << 10;

/// More metric families, appended to the unit's own (the exporter's, when `serve` exports).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Binds `addr` now (so a taken port is an error at start) and serves `GET /metrics` on a thread.
pub fn serve(
    addr: SocketAddr,
    desk: Arc<TriggerDesk>,
    extra: ExtraMetrics,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("snbuf-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
                let mut buf = vec![0u8; MAX_REQUEST_BYTES];
                let mut n = 0;
                // Up to the end of the request head, or the bound.
                while n < buf.len() {
                    match s.read(&mut buf[n..]) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let complete = buf[..n].windows(4).any(|w| w == b"\r\n\r\n");
                let head = String::from_utf8_lossy(&buf[..n]);
                let first = head.lines().next().unwrap_or_default();
                let (status, body) = if !complete && n == buf.len() {
                    ("431 Request Header Fields Too Large", "request too large\n".to_string())
                } else if first.starts_with("GET /metrics ") || first == "GET /metrics" {
                    ("200 OK", render(&desk) + &extra())
                } else if first.starts_with("GET ") {
                    ("404 Not Found", "try /metrics\n".to_string())
                } else {
                    ("400 Bad Request", "only GET /metrics\n".to_string())
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(bound)
}
