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

use crate::service::control::Server;

/// The metrics text for `server` now.
///
/// One piece: the exposition in the order of its families, each a few declarative lines (HELP,
/// TYPE, samples).
pub fn render(server: &Server) -> String {
    let unit = server.unit();
    let config = unit.config();
    let fb = config.frame_type.frame_bytes() as u64;
    let links = unit.totals();
    let mut out = String::new();
    let mut family =
        |name: &str, kind: &str, help: &str, values: &mut dyn Iterator<Item = (String, f64)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in values {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
    let per_link = |f: &dyn Fn(&crate::counters::LinkCounters) -> f64| {
        links
            .iter()
            .map(|l| (format!("{{link=\"{}\"}}", l.link), f(l)))
            .collect::<Vec<_>>()
            .into_iter()
    };
    family(
        "snbuf_link_input_frames_total",
        "counter",
        "Frames the link produced into its latency buffer.",
        &mut per_link(&|l| l.frames_in as f64),
    );
    family(
        "snbuf_link_input_bytes_total",
        "counter",
        "Bytes the link produced into its latency buffer.",
        &mut per_link(&|l| (l.frames_in * fb) as f64),
    );
    family(
        "snbuf_link_output_frames_total",
        "counter",
        "Frames of trigger windows made durable, over all bursts.",
        &mut per_link(&|l| l.durable_frames as f64),
    );
    family(
        "snbuf_link_output_bytes_total",
        "counter",
        "Bytes of trigger windows made durable, over all bursts.",
        &mut per_link(&|l| (l.durable_frames * fb) as f64),
    );
    family(
        "snbuf_link_lost_frames_total",
        "counter",
        "Frames of trigger windows lost (overwritten before written, missing, or after a failure).",
        &mut per_link(&|l| l.lost_frames as f64),
    );
    family(
        "snbuf_link_buffer_fill_frames",
        "gauge",
        "Frames the latency buffer holds now.",
        &mut per_link(&|l| l.buffer_fill_frames as f64),
    );
    family(
        "snbuf_link_buffer_capacity_frames",
        "gauge",
        "Frames the latency buffer holds when full.",
        &mut per_link(&|_| unit.buffer_capacity_frames() as f64),
    );
    family(
        "snbuf_link_backlog_frames",
        "gauge",
        "Frames of the window being recorded that are produced but not yet durable.",
        &mut per_link(&|l| l.backlog_frames as f64),
    );
    family(
        "snbuf_link_durable_timestamp_ticks",
        "gauge",
        "Detector timestamp (ticks) of the newest durable frame of the newest burst: the durable watermark.",
        &mut links
            .iter()
            .filter_map(|l| l.durable_until_timestamp.map(|t| (format!("{{link=\"{}\"}}", l.link), t as f64)))
            .collect::<Vec<_>>()
            .into_iter(),
    );
    family(
        "snbuf_link_failed",
        "gauge",
        "1 if the link failed in the burst being recorded.",
        &mut per_link(&|l| l.failed as u8 as f64),
    );
    if links.iter().any(|l| l.ingest.is_some()) {
        let ingest = |f: &dyn Fn(&IngestSnapshot) -> u64| {
            links
                .iter()
                .filter_map(|l| {
                    l.ingest
                        .map(|g| (format!("{{link=\"{}\"}}", l.link), f(&g) as f64))
                })
                .collect::<Vec<_>>()
                .into_iter()
        };
        family(
            "snbuf_link_ingest_frames_total",
            "counter",
            "Frames received from the network and kept, per link.",
            &mut ingest(&|g| g.frames),
        );
        family(
            "snbuf_link_ingest_kernel_drops_total",
            "counter",
            "Drops the kernel counted on the link's socket (receive buffer full): datagrams, or with GRO whole coalesced buffers; the frames lost are snbuf_link_ingest_missing_frames_total.",
            &mut ingest(&|g| g.kernel_drops),
        );
        family(
            "snbuf_link_ingest_missing_frames_total",
            "counter",
            "Frames missing from what the link sent, by its timestamps.",
            &mut ingest(&|g| g.timestamp_gap_frames),
        );
        family(
            "snbuf_link_ingest_sequence_gap_frames_total",
            "counter",
            "Frames missing from what the link sent, by its DAQEthHeader sequence numbers.",
            &mut ingest(&|g| g.sequence_gap_frames),
        );
        family(
            "snbuf_link_ingest_receives_total",
            "counter",
            "Messages received for the link (datagrams, or coalesced buffers with GRO): frames / receives is how many frames each carried (more than 1 with GRO).",
            &mut ingest(&|g| g.receives),
        );
        family(
            "snbuf_link_ingest_receive_calls_total",
            "counter",
            "System calls that received the link's messages (one, or several full coalesced buffers): frames / receive_calls is how many frames each crossing into the kernel carried.",
            &mut ingest(&|g| g.receive_calls),
        );
        family(
            "snbuf_link_ingest_rerouted_frames_total",
            "counter",
            "The link's frames the kernel queued on another link's socket and snbuf moved (BPF routing fell back to hash).",
            &mut ingest(&|g| g.rerouted),
        );
        type Reason = (&'static str, fn(&IngestSnapshot) -> u64);
        let reasons: [Reason; 6] = [
            ("implausible_timestamp", |g| g.implausible_timestamp),
            ("out_of_order", |g| g.out_of_order),
            ("short", |g| g.short),
            ("long", |g| g.long),
            ("bad_version", |g| g.bad_version),
            ("unknown_stream", |g| g.unknown_stream),
        ];
        family(
            "snbuf_link_ingest_dropped_datagrams_total",
            "counter",
            "Datagrams received and dropped, by reason: out of order, shorter or longer than a frame, another header version, a stream no link takes.",
            &mut links
                .iter()
                .filter_map(|l| l.ingest.map(|g| (l.link, g)))
                .flat_map(|(link, g)| {
                    reasons.iter().map(move |(r, f)| {
                        (format!("{{link=\"{link}\",reason=\"{r}\"}}"), f(&g) as f64)
                    })
                })
                .collect::<Vec<_>>()
                .into_iter(),
        );
    }
    let rates = unit.link_rates();
    let per_rate = |f: &dyn Fn(&crate::link_rates::LinkRate) -> Option<f64>| {
        rates
            .iter()
            .filter_map(|r| f(r).map(|v| (format!("{{link=\"{}\"}}", r.link), v)))
            .collect::<Vec<_>>()
            .into_iter()
    };
    family(
        "snbuf_link_clock_ratio",
        "gauge",
        "The link's data clock over the frame type's: detector ticks its newest frame advanced per wall-clock second (last few seconds), over the clock's Hz. 1 for a detector on its own clock.",
        &mut per_rate(&|r| r.clock_ratio),
    );
    family(
        "snbuf_link_rate_ratio",
        "gauge",
        "Bytes a second the link brings (last few seconds) over the rate the unit was configured for (which sized its buffer).",
        &mut per_rate(&|r| r.rate_ratio),
    );
    family(
        "snbuf_link_buffer_span_seconds",
        "gauge",
        "Detector seconds from the oldest to the newest frame the link's latency buffer holds: how far back a trigger can reach.",
        &mut per_rate(&|r| r.buffer_span_s),
    );
    family(
        "snbuf_window_not_buffered_seconds_total",
        "counter",
        "Seconds of accepted trigger windows that the latency buffers no longer held when the trigger came (recorded as lost).",
        &mut std::iter::once((String::new(), server.not_buffered_seconds_total())),
    );
    family(
        "snbuf_triggers_refused_total",
        "counter",
        "Triggers refused, over the socket and the fleet alike (each with its reason in the log, and in the fleet a missed event): a window too long, gone, far ahead or without room, a bad id, a busy or stopping unit.",
        &mut std::iter::once((String::new(), server.refused_total() as f64)),
    );
    let (by_state, recording) = server.burst_counts();
    family(
        "snbuf_bursts_total",
        "counter",
        "Bursts finished, by final state (sealed, failed, error).",
        &mut by_state
            .into_iter()
            .map(|(s, n)| (format!("{{state=\"{s}\"}}"), n as f64)),
    );
    family(
        "snbuf_recording",
        "gauge",
        "1 while a burst is being recorded.",
        &mut std::iter::once((String::new(), recording as u8 as f64)),
    );
    family(
        "snbuf_uptime_seconds",
        "gauge",
        "Seconds since the unit started.",
        &mut std::iter::once((String::new(), unit.uptime().as_secs_f64())),
    );
    out
}

/// The largest request read: a scrape request is a few hundred bytes.
const MAX_REQUEST_BYTES: usize = 8 << 10;

/// More metric families, appended to the unit's own (the exporter's, when `serve` exports).
pub type ExtraMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Binds `addr` now (so a taken port is an error at start) and serves `GET /metrics` on a thread.
pub fn serve(
    addr: SocketAddr,
    server: Arc<Server>,
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
                    ("200 OK", render(&server) + &extra())
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
