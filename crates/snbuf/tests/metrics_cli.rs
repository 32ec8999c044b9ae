//! `snbuf serve --metrics`: the Prometheus endpoint of a real server. Every documented family is
//! there with HELP and TYPE; counters move with the links and with a burst (output frames equal
//! what the burst's manifest holds); other paths and methods are refused.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use common::{snbuf, wait_for_socket, KillOnDrop};

fn get(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the sample `name{labels}` (or `name` without labels).
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{series} not in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_metrics_endpoint_counts_links_and_bursts() {
    let dir = tempfile::tempdir().unwrap();
    let options = [common::SMALL_UNIT, &["--pre", "300ms", "--post", "300ms"]].concat();
    let (mut cmd, out, socket) = common::serve_command(dir.path(), &options);
    cmd.args(["--metrics", "127.0.0.1:0"]);
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _server = KillOnDrop(child);
    let addr = common::metrics_address(stderr);
    // From here on nobody reads the server's stderr (the pipe is closed): its log lines must be
    // dropped, never end the server.
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(500));

    let r = get(&addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
    for family in [
        "snbuf_link_input_frames_total",
        "snbuf_link_input_bytes_total",
        "snbuf_link_output_frames_total",
        "snbuf_link_output_bytes_total",
        "snbuf_link_lost_frames_total",
        "snbuf_link_buffer_fill_frames",
        "snbuf_link_buffer_capacity_frames",
        "snbuf_link_backlog_frames",
        "snbuf_link_durable_timestamp_ticks",
        "snbuf_link_failed",
        "snbuf_bursts_total",
        "snbuf_recording",
        "snbuf_uptime_seconds",
    ] {
        assert!(
            r.contains(&format!("# TYPE {family} ")),
            "{family} missing:\n{r}"
        );
    }
    assert!(sample(&r, "snbuf_link_input_frames_total{link=\"1\"}") > 0.0);
    assert_eq!(
        sample(&r, "snbuf_link_output_frames_total{link=\"0\"}"),
        0.0
    );
    assert_eq!(sample(&r, "snbuf_recording"), 0.0);

    let s = socket.to_str().unwrap();
    let o = snbuf(&["trigger", "--socket", s, "--burst-id", "b", "--wait"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("b/manifest.json")).unwrap())
            .unwrap();
    let r = get(&addr, "GET /metrics HTTP/1.1\r\n\r\n");
    for l in manifest["links"].as_array().unwrap() {
        let link = l["link"].as_u64().unwrap();
        assert_eq!(
            sample(
                &r,
                &format!("snbuf_link_output_frames_total{{link=\"{link}\"}}")
            ),
            l["frames"].as_u64().unwrap() as f64,
            "{r}"
        );
        assert_eq!(
            sample(
                &r,
                &format!("snbuf_link_durable_timestamp_ticks{{link=\"{link}\"}}")
            ),
            l["last_timestamp"].as_u64().unwrap() as f64
        );
    }
    assert_eq!(sample(&r, "snbuf_bursts_total{state=\"sealed\"}"), 1.0);

    assert!(get(&addr, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(get(&addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 400"));
    // A request over the bound is cut there (answered 431, or reset while the client is still
    // sending), and the endpoint goes on.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(format!("GET /{} HTTP/1.1\r\n", "x".repeat(20_000)).as_bytes());
    let mut r = String::new();
    if s.read_to_string(&mut r).is_ok() {
        assert!(r.is_empty() || r.starts_with("HTTP/1.1 431"), "{r}");
    }
    assert!(get(&addr, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
}
