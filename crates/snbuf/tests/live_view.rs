//! `snbuf status --watch`, tried as a person would: in a real terminal (tmux), its screen read
//! back with `capture-pane`. The links and an idle unit show; a burst shows as recording with
//! numbers that move, then as past and valid; a server that goes away is shown, not a crash;
//! `q` quits. Off a terminal it prints the one-shot report. Needs tmux (skipped without it
//! unless SNBUF_REQUIRE_TMUX is set).

mod common;

use std::time::Duration;

use common::{snbuf, wait_for_socket, KillOnDrop, Tmux};

/// The durable chunk counts in the links table.
fn chunk_counts(screen: &str) -> Vec<u64> {
    screen
        .lines()
        .filter(|l| l.trim_start().starts_with('│') || l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l
                .trim_matches(|c| c == '│' || c == '|' || c == ' ')
                .split_whitespace()
                .collect();
            // link, input (value unit), holds (value s), fill, backlog, chunks, ...
            (cells.len() >= 9 && cells[0].parse::<u64>().is_ok() && cells[2].ends_with("/s"))
                .then(|| cells[7].parse().ok())
                .flatten()
        })
        .collect()
}

#[test]
fn the_live_view_shows_a_burst_recording_and_survives_its_server() {
    let Some(tmux) = common::tmux::installed() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, _, socket) = common::serve_command(
        dir.path(),
        &[
            "--links",
            "2",
            "--rate-per-link",
            "4MB/s",
            "--buffer",
            "2s",
            "--pre",
            "500ms",
            "--post",
            "4s",
            "--chunk-frames",
            "16",
            "--method",
            "direct",
        ],
    );
    let mut server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    let t = Tmux::start(
        tmux,
        "status",
        &format!(
            "{} status --watch --socket {}",
            env!("CARGO_BIN_EXE_snbuf"),
            socket.display()
        ),
    );
    let s = t.wait_for(Duration::from_secs(20), "the idle unit", |s| {
        s.contains("idle: ready for a trigger") && s.contains("durable until")
    });
    assert!(s.contains("2 links of protodune-wib"), "{s}");
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "watched",
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let first = t.wait_for(Duration::from_secs(20), "the burst recording", |s| {
        s.contains("RECORDING burst watched") && chunk_counts(s).iter().sum::<u64>() > 0
    });
    let later = t.wait_for(Duration::from_secs(20), "the durable chunks to grow", |s| {
        chunk_counts(s).iter().sum::<u64>() > chunk_counts(&first).iter().sum::<u64>()
    });
    assert!(later.contains("of the window durable"), "{later}");
    t.wait_for(
        Duration::from_secs(30),
        "the burst among past bursts",
        |s| {
            s.contains("watched")
                && s.contains("sealed")
                && s.contains("valid")
                && s.contains("idle")
        },
    );
    // The server goes away: the view says so and keeps running.
    let _ = server.0.kill();
    let _ = server.0.wait();
    t.wait_for(Duration::from_secs(20), "the lost server", |s| {
        s.contains("SERVER UNREACHABLE")
    });
    t.quit_with_q();
}

#[test]
fn off_a_terminal_the_watch_prints_the_one_shot_report() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, _, socket) = common::serve_command(
        dir.path(),
        &[
            "--links",
            "2",
            "--rate-per-link",
            "4MB/s",
            "--buffer",
            "1s",
            "--pre",
            "200ms",
        ],
    );
    let _server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    let o = snbuf(&["status", "--watch", "--socket", socket.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("links of protodune-wib") && text.contains("idle"),
        "{text}"
    );
}
