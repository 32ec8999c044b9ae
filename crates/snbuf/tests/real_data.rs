//! Real detector data in, byte for byte, over real sockets: `snbuf emit` sends frames in DUNE's
//! own layouts to `snbuf serve --source udp://...`, a trigger records a window, and every frame
//! in the burst is the frame that was sent (the emulated frames are a function of link and
//! timestamp, so the test recomputes each). A replayed recording comes out unchanged but for
//! its timestamps and sequence numbers. Overload and bad datagrams are counted, never silent,
//! never recorded. By default the sender batches each link's frames into GSO sends and the
//! receiver takes them as coalesced buffers (UDP GRO); each is also tested switched off.

mod common;

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{free_udp_port, snbuf, stderr, KillOnDrop, Served};
use serde_json::Value;
use snbuf_burst::Manifest;
use snbuf_readout::{FrameGen, FrameType, Payload};

/// Ticks between a link's frames for `t` sent at the 10 MB/s these tests use: below every frame
/// type's own rate, so both sides are a sub-sampled detector on its real clock.
fn step(t: FrameType) -> u64 {
    snbuf_frames::DetectorClock::of(t).frame_step_ticks(10e6 / t.frame_bytes() as f64)
}

/// `snbuf serve` receiving `links` links of `frame` on `port`.
fn serve(root: &Path, port: u16, frame: &str, links: u32, extra: &[&str]) -> Served {
    let out = root.join("data");
    let socket = root.join("ctl.sock");
    let mut cmd = common::serve_command_into(&out, &socket, &[]);
    cmd.args(["--source", &format!("udp://127.0.0.1:{port}")])
        .args(["--frame", frame, "--links", &links.to_string()])
        .args(["--rate-per-link", "10MB/s", "--buffer", "3s"])
        .args(["--pre", "1s", "--post", "500ms", "--method", "direct"])
        .args(["--run", "42", "--unit", "apa1"])
        .args(extra);
    common::started(&mut cmd, &out, &socket, None)
}

/// `snbuf emit` in the background for `seconds`.
fn emit(port: u16, frame: &str, links: u32, seconds: u32, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["emit", "--to", &format!("udp://127.0.0.1:{port}")])
        .args(["--frame", frame, "--links", &links.to_string()])
        .args([
            "--rate-per-link",
            "10MB/s",
            "--duration",
            &format!("{seconds}s"),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Triggers `served` now and returns the sealed burst's directory.
fn trigger(served: &Served, id: &str) -> PathBuf {
    let o = snbuf(&[
        "trigger",
        "--socket",
        served.socket.to_str().unwrap(),
        "--burst-id",
        id,
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    served.out.join(id)
}

fn status(served: &Served) -> Value {
    let o = snbuf(&[
        "status",
        "--socket",
        served.socket.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Every frame of link `link` in `burst`, in order.
fn frames_of(burst: &Path, link: u32, frame_bytes: usize) -> Vec<Vec<u8>> {
    common::link_frames(burst, link)
        .chunks(frame_bytes)
        .map(|f| f.to_vec())
        .collect()
}

/// The burst holds, on every link, exactly the frames the emitter sent for its window.
fn assert_byte_identical(burst: &Path, t: FrameType, links: u32) {
    let m = assert_recorded_as_sent(burst, t, links);
    for rec in &m.links {
        assert_eq!(rec.lost_frames, 0, "link {}", rec.link);
    }
}

/// Every frame `burst` holds is the frame the emitter sent at its timestamp, and the burst
/// verifies; returns its manifest (what was lost is the caller's to check).
fn assert_recorded_as_sent(burst: &Path, t: FrameType, links: u32) -> Manifest {
    let m = Manifest::read(burst).unwrap();
    assert_eq!(m.state, snbuf_burst::BurstState::Sealed);
    assert_eq!(m.run_number, Some(42));
    assert_eq!(m.unit.as_deref(), Some("apa1"));
    let layout = t.layout();
    for link in 0..links {
        let frames = frames_of(burst, link, layout.frame_bytes as usize);
        let rec = &m.links[link as usize];
        assert!(frames.len() > 100, "link {link}: {} frames", frames.len());
        assert_eq!(frames.len() as u64, rec.data.frames);
        let mut sent = FrameGen::new(t, link, &Payload::Emulated)
            .unwrap()
            .with_frame_step(step(t));
        for f in &frames {
            let ts = layout.timestamp(f);
            assert_eq!(sent.frame_at(ts), &f[..], "link {link}, timestamp {ts}");
        }
        // The manifest knows where the link's data comes from in the detector.
        let id = rec.identity.expect("identity");
        let emulated = snbuf_readout::framegen::emulated_identity(t, link);
        assert_eq!(
            (id.crate_id, id.slot_id, id.stream_id, id.source_id),
            (
                emulated.crate_id,
                emulated.slot_id,
                emulated.stream_id,
                link
            )
        );
    }
    let o = snbuf(&["verify", burst.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    m
}

#[test]
fn wibeth_frames_sent_over_udp_are_recorded_byte_for_byte() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wibeth", 3, &[]);
    let mut sender = KillOnDrop(emit(port, "wibeth", 3, 6, &[]));
    std::thread::sleep(Duration::from_millis(2500));
    let burst = trigger(&served, "wibeth");
    assert_byte_identical(&burst, FrameType::WibEth, 3);
    let v = status(&served);
    assert_eq!(v["ingest"]["gro"], true, "{v}");
    // The default nap, within the bound the socket buffer sets; the thread placed on the
    // first CPU allowed, since loopback hangs off no NUMA node.
    let nap_s = v["ingest"]["nap_s"].as_f64().unwrap();
    assert!(nap_s > 0.0 && nap_s <= 2e-3, "{v}");
    assert_eq!(v["ingest"]["nic"], "lo (no NUMA node)", "{v}");
    assert!(v["ingest"]["receive_cpu"].is_u64(), "{v}");
    for l in v["ingest"]["links"].as_array().unwrap() {
        assert!(l["frames"].as_u64().unwrap() > 0, "{l}");
        assert_eq!(l["timestamp_gap_frames"], 0, "{l}");
        assert_eq!(l["sequence_gap_frames"], 0, "{l}");
        // The sender's GSO batches arrived as coalesced buffers, several frames a receive.
        assert!(l["coalesced"].as_u64().unwrap() > 0, "{l}");
        assert!(
            l["receives"].as_u64().unwrap() < l["frames"].as_u64().unwrap(),
            "{l}"
        );
    }
    // The sender ends by itself after its 6 s; one that does not is killed.
    let _ = sender.wait_within(Duration::from_secs(60));
}

/// A trigger sent as soon as the server is up, before any frame has come (the sender starts
/// half a second later), waits for the first frame and is taken, not refused: a unit just
/// started loses no trigger to the moment its links take to deliver. Its window holds the data
/// that came, byte for byte, and what the window asked for before the first frame is counted
/// lost (the unit cannot know it was never sent), none of it after.
#[test]
fn a_trigger_sent_before_the_first_frame_waits_for_it() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wibeth", 1, &[]);
    let socket = served.socket.clone();
    let early = std::thread::spawn(move || {
        snbuf(&[
            "trigger",
            "--socket",
            socket.to_str().unwrap(),
            "--burst-id",
            "early",
            "--wait",
        ])
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut sender = KillOnDrop(emit(port, "wibeth", 1, 4, &[]));
    let o = early.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let burst = served.out.join("early");
    let m = assert_recorded_as_sent(&burst, FrameType::WibEth, 1);
    let (window, link) = (m.trigger.as_ref().unwrap(), &m.links[0]);
    let first = link.data.first_timestamp.unwrap();
    assert!(first >= window.window_start_timestamp, "{m:?}");
    let before_first = (first - window.window_start_timestamp) / step(FrameType::WibEth);
    assert_eq!(link.lost_frames, before_first, "{m:?}");
    let _ = sender.wait_within(Duration::from_secs(60));
}

/// The same frames, byte for byte, whichever side does without batching: a receiver without
/// GRO, three links on one port and one link alone (the kernel cuts the sender's GSO batches
/// into datagrams), and a sender without GSO to a receiver with GRO (nothing to coalesce). GRO
/// on is the default of the tests above. The receiver that never naps between polls
/// (`--receive-nap off`) gets the same bytes.
#[test]
fn wibeth_frames_are_recorded_byte_for_byte_with_gro_or_gso_off() {
    for (links, serve_extra, emit_extra) in [
        (
            3,
            &["--gro", "off", "--receive-nap", "off"][..],
            ["--gso", "on"],
        ),
        (1, &["--gro", "off"][..], ["--gso", "on"]),
        (3, &["--gro", "on"][..], ["--gso", "off"]),
    ] {
        let root = tempfile::tempdir().unwrap();
        let port = free_udp_port();
        let served = serve(root.path(), port, "wibeth", links, serve_extra);
        let _sender = KillOnDrop(emit(port, "wibeth", links, 6, &emit_extra));
        std::thread::sleep(Duration::from_millis(2500));
        let burst = trigger(&served, "plain");
        assert_byte_identical(&burst, FrameType::WibEth, links);
        let v = status(&served);
        assert_eq!(v["ingest"]["gro"], serve_extra[1] == "on", "{v}");
        let napless = serve_extra.contains(&"--receive-nap");
        assert_eq!(v["ingest"]["nap_s"].as_f64() == Some(0.0), napless, "{v}");
        for l in v["ingest"]["links"].as_array().unwrap() {
            assert_eq!(l["coalesced"], 0, "{serve_extra:?} {emit_extra:?}: {l}");
            assert_eq!(l["receives"], l["frames"], "one datagram a frame: {l}");
            assert_eq!(l["sequence_gap_frames"], 0, "{l}");
        }
    }
}

/// `snbuf emit --digest` says what it sent, and it is exactly what arrives: every datagram, per
/// stream, counted, its timestamps, and a CRC-32C of all its bytes in order, with GSO on (the
/// kernel cut the batches, since this plain socket does not take coalesced buffers) and off.
#[test]
fn emit_sends_exactly_the_frames_its_digest_says() {
    for gso in ["on", "off"] {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // Room for the whole second (a loaded machine may not run the receiver for a while).
        let rcvbuf: libc::c_int = 16 << 20;
        // SAFETY: a valid socket and a c_int option value of its size.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&rx),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&rcvbuf as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let emit_done = sent.clone();
        let port = rx.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("emit.json");
        let receiver = std::thread::spawn(move || {
            let mut got: Vec<Vec<u8>> = vec![Vec::new(); 2];
            let mut datagrams = [0u64; 2];
            let mut buf = vec![0u8; 65536];
            let until = std::time::Instant::now() + Duration::from_secs(30);
            // Until the sender has ended and the socket is drained.
            while std::time::Instant::now() < until {
                match rx.recv(&mut buf) {
                    Ok(n) => {
                        assert_eq!(n, 7200, "one frame per datagram");
                        let stream = FrameType::WibEth
                            .layout()
                            .identity(&buf[..n])
                            .unwrap()
                            .stream_id as usize;
                        got[stream].extend_from_slice(&buf[..n]);
                        datagrams[stream] += 1;
                    }
                    Err(_) if emit_done.load(std::sync::atomic::Ordering::Acquire) => break,
                    Err(_) => {}
                }
            }
            (got, datagrams)
        });
        let o = snbuf(&[
            "emit",
            "--to",
            &format!("udp://127.0.0.1:{port}"),
            "--links",
            "2",
            "--rate-per-link",
            "5MB/s",
            "--duration",
            "1s",
            "--gso",
            gso,
            "--digest",
            "--json",
            json.to_str().unwrap(),
        ]);
        sent.store(true, std::sync::atomic::Ordering::Release);
        assert!(o.status.success(), "{}", stderr(&o));
        let (got, datagrams) = receiver.join().unwrap();
        let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(report["gso"], gso == "on", "{report}");
        let layout = FrameType::WibEth.layout();
        for (l, d) in report["links"].as_array().unwrap().iter().enumerate() {
            assert!(datagrams[l] > 100, "link {l}: {} datagrams", datagrams[l]);
            assert_eq!(d["frames"], datagrams[l], "gso {gso}, link {l}");
            assert_eq!(d["first_timestamp"], layout.timestamp(&got[l][..7200]));
            assert_eq!(
                d["last_timestamp"],
                layout.timestamp(&got[l][got[l].len() - 7200..])
            );
            assert_eq!(
                d["crc32c"],
                snbuf_platform::crc::crc32c_in_cache(&[&got[l]]),
                "gso {gso}, link {l}: the bytes sent"
            );
        }
    }
}

#[test]
fn wib2_superchunks_over_udp_are_recorded_byte_for_byte() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wib2", 1, &[]);
    let _sender = KillOnDrop(emit(port, "wib2", 1, 6, &[]));
    std::thread::sleep(Duration::from_millis(2500));
    let burst = trigger(&served, "wib2");
    assert_byte_identical(&burst, FrameType::Wib2, 1);
}

/// Regression: replayed frames had snbuf's own timestamp and sequence number written over
/// bytes 0..16, which in a WIBEth frame are DUNE's DAQEthHeader: a replayed capture came out
/// corrupted. Now only the timestamp and seq_id fields change, where the frame keeps them.
#[test]
fn a_replayed_recording_is_recorded_unchanged_but_for_its_timestamps() {
    let root = tempfile::tempdir().unwrap();
    // A hand-built DUNE recording: three WIBEth frames back to back. DAQEthHeader word 0 for
    // version 1, det_id 3, crate 4, slot 1, stream 2, seq 0: 1 | 3<<6 | 4<<12 | 1<<22 | 2<<26.
    let word0: u64 = 1 | (3 << 6) | (4 << 12) | (1 << 22) | (2 << 26);
    let mut rec = Vec::new();
    for k in 0..3u64 {
        let mut f = snbuf_platform::rng::Rng::new(k).bytes(7200);
        f[0..8].copy_from_slice(&word0.to_le_bytes());
        f[8..16].copy_from_slice(&(1_000_000 + k * 2048).to_le_bytes());
        rec.push(f);
    }
    let file = root.path().join("0x00000002.bin");
    std::fs::write(&file, rec.concat()).unwrap();
    let out = root.path().join("rec");
    let a = common::small_recording(
        &out,
        "replay",
        &[
            ("--frame", "wibeth"),
            ("--links", "1"),
            ("--rate-per-link", "5MB/s"),
            ("--replay", file.to_str().unwrap()),
        ],
    );
    let o = common::snbuf_owned(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    let layout = FrameType::WibEth.layout();
    let rewritten = layout.rewritten_bytes();
    let same_but_rewritten = |a: &[u8], b: &[u8]| {
        (0..a.len()).all(|i| a[i] == b[i] || rewritten.iter().any(|r| r.contains(&i)))
    };
    let frames = frames_of(&out.join("replay"), 0, 7200);
    assert!(frames.len() > 100);
    let mut prev: Option<(usize, u64)> = None;
    for f in &frames {
        let source: Vec<usize> = (0..3).filter(|&k| same_but_rewritten(f, &rec[k])).collect();
        assert_eq!(
            source.len(),
            1,
            "each frame is one of the recording's, unchanged"
        );
        let (k, ts) = (source[0], layout.timestamp(f));
        assert_eq!(layout.identity(f).unwrap().stream_id, 2, "identity kept");
        if let Some((pk, pts)) = prev {
            assert_eq!(k, (pk + 1) % 3, "in turn, looping");
            // Recorded at 5 MB/s: a sub-sampled link, one frame every `replay_step` ticks.
            let replay_step =
                snbuf_frames::DetectorClock::of(FrameType::WibEth).frame_step_ticks(5e6 / 7200.0);
            assert_eq!(ts, pts + replay_step, "timestamps continue");
            assert_eq!(
                layout.sequence(f),
                Some((ts / replay_step) % 4096),
                "sequence numbers follow"
            );
        }
        prev = Some((k, ts));
    }
}

/// A receiver that falls behind (here: stopped for 400 ms while the detector sends into a small
/// socket buffer) loses datagrams in the kernel. That loss is counted (kernel drops, gaps in
/// sequence and time) and, inside a window, in the manifest: recorded + lost = window.
#[test]
fn overload_at_ingest_is_counted_never_silent() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wibeth", 2, &["--rcvbuf", "64KiB"]);
    let _sender = KillOnDrop(emit(port, "wibeth", 2, 8, &[]));
    std::thread::sleep(Duration::from_millis(1500));
    let pid = served.proc.0.id() as i32;
    // SAFETY: signalling our own child by pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    std::thread::sleep(Duration::from_millis(300));
    let burst = trigger(&served, "overload");
    let m = Manifest::read(&burst).unwrap();
    let t = m.trigger.unwrap();
    let window = (t.window_end_timestamp - t.window_start_timestamp) / step(FrameType::WibEth);
    for l in &m.links {
        assert!(l.lost_frames > 0, "link {}: the gap is counted", l.link);
        assert_eq!(l.data.frames + l.lost_frames, window, "link {}", l.link);
    }
    let o = snbuf(&["verify", burst.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let v = status(&served);
    for l in v["ingest"]["links"].as_array().unwrap() {
        // With GRO on (the default): the overload hit coalesced buffers.
        assert!(l["coalesced"].as_u64().unwrap() > 0, "{l}");
        assert!(l["kernel_drops"].as_u64().unwrap() > 0, "{l}");
        assert!(l["timestamp_gap_frames"].as_u64().unwrap() > 0, "{l}");
        assert!(l["sequence_gap_frames"].as_u64().unwrap() > 0, "{l}");
    }
}

/// Datagrams that are not a routed link's frame (short, long, another header version, an
/// unknown stream, garbage) are counted and never recorded, and the unit keeps recording.
#[test]
fn bad_datagrams_are_counted_and_never_recorded() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wibeth", 2, &["--header-version", "1"]);
    let _sender = KillOnDrop(emit(port, "wibeth", 2, 6, &[]));
    std::thread::sleep(Duration::from_millis(1000));
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = format!("127.0.0.1:{port}");
    let mut good = FrameGen::new(FrameType::WibEth, 0, &Payload::Emulated).unwrap();
    let ts = 2048 * 123_456;
    let frame = good.frame_at(ts).to_vec();
    let layout = FrameType::WibEth.layout();
    let mut bad = Vec::new();
    bad.push(frame[..100].to_vec()); // short
    bad.push([frame.clone(), vec![0; 100]].concat()); // long
    let mut v = frame.clone();
    let mut id = layout.identity(&v).unwrap();
    id.version = 5;
    layout.write_identity(&mut v, &id);
    bad.push(v); // another header version
    let mut v = frame.clone();
    id.version = 1;
    id.stream_id = 9;
    layout.write_identity(&mut v, &id);
    bad.push(v); // a stream no link takes
    let mut garbage = snbuf_platform::rng::Rng::new(7).bytes(7200);
    garbage[0] = 0x3F; // version 63
    bad.push(garbage);
    for _ in 0..20 {
        for d in &bad {
            s.send_to(d, &to).unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(800));
    let burst = trigger(&served, "clean");
    assert_byte_identical(&burst, FrameType::WibEth, 2);
    let v = status(&served);
    let sum = |k: &str| -> u64 {
        v["ingest"]["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["dropped"][k].as_u64().unwrap())
            .sum()
    };
    assert!(sum("short") >= 20 && sum("long") >= 20, "{v}");
    assert!(sum("bad_version") >= 40, "version 5 and the garbage: {v}");
    assert!(sum("unknown_stream") >= 20, "{v}");
    // And the unit records on.
    let burst = trigger(&served, "after");
    assert_byte_identical(&burst, FrameType::WibEth, 2);
}

#[test]
fn bad_network_options_are_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let r = |extra: &[&str]| {
        let mut a = vec!["record", "--output", d];
        a.extend_from_slice(extra);
        snbuf(&a)
    };
    common::assert_refused(&r(&["--source", "tcp://1.2.3.4:5"]), 2, "--source");
    common::assert_refused(&r(&["--source", "udp://nowhere"]), 2, "ADDR:PORT");
    common::assert_refused(&r(&["--streams", "1,2"]), 2, "needs --source udp");
    common::assert_refused(
        &r(&[
            "--source",
            "udp://127.0.0.1:9",
            "--links",
            "2",
            "--streams",
            "1",
        ]),
        2,
        "one per link",
    );
    common::assert_refused(
        &r(&["--source", "udp://127.0.0.1:9", "--header-version", "99"]),
        2,
        "--header-version",
    );
    let bad_replay = dir.path().join("x.bin");
    std::fs::write(&bad_replay, [0u8; 7201]).unwrap();
    common::assert_refused(
        &r(&[
            "--frame",
            "wibeth",
            "--replay",
            bad_replay.to_str().unwrap(),
        ]),
        2,
        "not whole wibeth frames",
    );
    common::assert_refused(&snbuf(&["emit", "--to", "tcp://x"]), 2, "udp://HOST:PORT");
    common::assert_refused(
        &snbuf(&[
            "emit",
            "--to",
            "udp://127.0.0.1:9",
            "--frame",
            "wib2",
            "--links",
            "2",
        ]),
        2,
        "no stream_id",
    );
}

/// A stream whose clock sits at the end of its range (a wrong or hostile sender): its trigger is
/// recorded (the window clipped at the clock's end, what never came counted lost), a cancel of
/// the next one is answered, and the unit goes on. Arithmetic past the end would panic a writer
/// in a debug build and, wrapped in a release one, count an enormous loss.
#[test]
fn a_stream_at_the_end_of_the_clock_is_recorded_not_a_panic() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let served = serve(root.path(), port, "wibeth", 1, &["--rcvbuf", "8MiB"]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = format!("127.0.0.1:{port}");
    let mut gen = FrameGen::new(FrameType::WibEth, 0, &Payload::Emulated).unwrap();
    let step = FrameType::WibEth.ticks_per_frame();
    let frames = 600u64;
    // The last frame half a step before the clock's end: the next one would be past it.
    let first = u64::MAX - step / 2 - (frames - 1) * step;
    let send = |gen: &mut FrameGen, from: u64, to_frame: u64| {
        for k in from..to_frame {
            s.send_to(gen.frame_at(first + k * step), &to).unwrap();
            std::thread::sleep(Duration::from_micros(500));
        }
    };
    send(&mut gen, 0, frames / 2);
    let burst = trigger(&served, "at-the-end");
    let m = Manifest::read(&burst).unwrap();
    assert_eq!(m.trigger.as_ref().unwrap().window_end_timestamp, u64::MAX);
    let recorded = m.links[0].data.frames;
    assert!(recorded > 0, "what was sent is recorded: {m:?}");
    let o = snbuf(&["verify", burst.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pictures = root.path().join("show");
    let o = snbuf(&[
        "show",
        burst.to_str().unwrap(),
        "--out",
        pictures.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "show draws it: {}", stderr(&o));
    // The next trigger, cancelled while it waits for frames that never come.
    let sock = served.socket.to_str().unwrap();
    let waiting = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["trigger", "--socket", sock, "--burst-id", "cancelled"])
        .args(["--post", "30s", "--wait"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _waiting = KillOnDrop(waiting);
    send(&mut gen, frames / 2, frames);
    std::thread::sleep(Duration::from_millis(500));
    let o = snbuf(&[
        "trigger",
        "--socket",
        sock,
        "--cancel",
        "cancelled",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = snbuf(&["verify", served.out.join("cancelled").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(status(&served)["ok"], true, "the unit goes on");
}
