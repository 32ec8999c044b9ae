//! Writes in flight, through the real recorder (`record`: links, latency buffers, the window
//! writer, io_uring sinks), with the device's side played by injected faults:
//!
//! - **The zero-copy guard.** io_uring writes a chunk's payload straight from the latency buffer,
//!   and the device reads those ring slots until the write completes. A link that overwrites
//!   them meanwhile must not have that chunk acknowledged: `window_writer.rs::finish_chunk`
//!   asks the ring, after the write completed, whether it still holds the frames. Here the
//!   device reads the ring only when a write completes, 300 ms late (`slow-completion`), while
//!   the link fills its 100 ms buffer three times over: without that check, chunks whose bytes
//!   are not the ones checksummed would be acknowledged (and the burst would not verify).
//! - **A device that stops completing** (`stall`): the wait ends at the completion deadline,
//!   the link is failed with the reason, its loss is counted, and the other link records its
//!   whole window.
//!
//! Both need io_uring; without it they skip, unless SNBUF_REQUIRE_URING is set (CI): then they
//! fail.

use std::path::Path;
use std::time::Duration;

use snbuf_burst::manifest::{link_file_name, LinkState};
use snbuf_burst::{scan, Expect};
use snbuf_persist::fault::{FaultKind, FaultPlan};
use snbuf_persist::{Method, PageSize, SyncMode};
use snbuf_platform::cpu;
use snbuf_readout::{FrameGen, FrameType, Payload};
use snbuf_unit::{record, RecordConfig, RecordSummary, Source};

/// 256-byte frames 25 ticks apart, with the timestamp at bytes 0..8: 16 to a 4 KiB block, so
/// whole chunks go from the ring.
const FRAME: FrameType = FrameType::Custom {
    frame_bytes: 256,
    ticks_per_frame: 25,
    timestamp_offset: 0,
};

/// The tests run one at a time: each records at 20,000 frames/s per link into buffers of a
/// tenth of a second or so, and on two cores one test's links would take the CPU another's
/// healthy link needs to keep up.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether io_uring can be used here; a test without it skips, or fails under
/// SNBUF_REQUIRE_URING.
fn uring_here() -> bool {
    snbuf_testkit::available_or_skip(
        "SNBUF_REQUIRE_URING",
        "io_uring",
        snbuf_persist::backends::uring::available(),
    )
}

/// Two links at 20,000 frames/s (5 MB/s) on io_uring, one writer each, with `fault` on link 0.
fn config(out: &Path, fault: FaultKind, buffer: Duration) -> RecordConfig {
    RecordConfig {
        frame_type: FRAME,
        links: 2,
        frames_per_s_per_link: 20_000.0,
        buffer,
        pre: Duration::from_millis(50),
        post: Duration::from_millis(700),
        trigger_after: Duration::from_millis(300),
        method: Method::Uring,
        sync_mode: SyncMode::Fdatasync,
        output_dir: out.to_path_buf(),
        more_outputs: Vec::new(),
        burst_id: "b".into(),
        writers: 2,
        cpus: cpu::allowed_cpus(),
        page_size: PageSize::Small4K,
        chunk_frames: 64,
        chunks_per_persist: 1,
        source: Source::Emulated {
            payload: Payload::Emulated,
        },
        run_number: None,
        unit_id: Some("test-unit".into()),
        source_ids: vec![],
        status_file: None,
        faults: vec![FaultPlan {
            kind: fault,
            link: Some(0),
        }],
        completion_deadline: snbuf_persist::sink::DEFAULT_COMPLETION_DEADLINE,
        max_window: snbuf_unit::config::DEFAULT_MAX_WINDOW,
        max_burst: 2 * snbuf_unit::config::DEFAULT_MAX_WINDOW,
    }
}

/// `record(cfg)`, failing the test if it has not returned within 2 minutes: a writer that
/// waits on a stalled or stuck device without end (a deadline or the watchdog gone) must fail
/// here, not hang the suite. (A stuck recording is left behind in its thread.)
fn record_within(cfg: &RecordConfig) -> RecordSummary {
    let (tx, rx) = std::sync::mpsc::channel();
    let cfg = cfg.clone();
    std::thread::spawn(move || {
        let _ = tx.send(record(&cfg, |_| {}));
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(r) => r.unwrap(),
        Err(_) => panic!("the recording did not end within 120 s: something waited without end"),
    }
}

/// Every frame of `link`'s file is the one the link sent at its timestamp, byte for byte;
/// returns how many there are.
fn frames_are_the_links(r: &RecordSummary, link: u32, step: u64) -> u64 {
    let bytes = std::fs::read(r.result.burst_dir.join(link_file_name(link))).unwrap();
    let report = scan(&bytes[..], Expect::default()).unwrap();
    let mut sent = FrameGen::new(FRAME, link, &Payload::Emulated)
        .unwrap()
        .with_frame_step(step);
    let mut n = 0;
    for c in &report.chunks {
        let start = (c.offset + c.payload_offset) as usize;
        for f in bytes[start..start + c.payload_bytes as usize].chunks(256) {
            let ts = u64::from_le_bytes(f[..8].try_into().unwrap());
            assert_eq!(sent.frame_at(ts), f, "link {link}: frame at {ts}");
            n += 1;
        }
    }
    n
}

/// Frames the window holds on each link.
fn window_frames(r: &RecordSummary, step: u64) -> u64 {
    (r.result.trigger.window_end_timestamp - r.result.trigger.window_start_timestamp).div_ceil(step)
}

#[test]
fn a_chunk_the_link_overwrote_while_its_write_was_in_flight_is_never_acknowledged() {
    let _serial = one_at_a_time();
    if !uring_here() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    // The first 64 KiB of link 0's file complete at once (a few chunks acknowledged); every
    // write after completes 300 ms late, from the ring as it is then: 3 buffers later.
    let late = FaultKind::SlowCompletion {
        delay: Duration::from_millis(300),
        after_bytes: 64 << 10,
    };
    let cfg = config(out.path(), late, Duration::from_millis(100));
    let step = cfg.frame_step_ticks();
    let r = record_within(&cfg);
    assert!(
        r.verify.valid,
        "every acknowledged chunk holds the bytes it was checksummed with: {:?} {:?}",
        r.verify.problems, r.verify.links
    );
    let window = window_frames(&r, step);
    let (l0, l1) = (&r.manifest.links[0], &r.manifest.links[1]);
    assert!(l0.data.chunks > 0, "the chunks before the fault are kept");
    assert!(
        l0.lost_frames > 0,
        "the chunks overwritten in flight are counted lost: {l0:?}"
    );
    assert_eq!(
        l0.data.frames + l0.lost_frames,
        window,
        "link 0: recorded + lost = the window"
    );
    assert_eq!(l0.state, LinkState::Ok, "loss, not failure: {l0:?}");
    assert_eq!(frames_are_the_links(&r, 0, step), l0.data.frames);
    // The other link records everything, from its ring.
    assert_eq!((l1.data.frames, l1.lost_frames), (window, 0), "{l1:?}");
    assert_eq!(frames_are_the_links(&r, 1, step), window);
    assert!(
        r.result.chunks_from_source > 0,
        "written from the rings: zero copy"
    );
}

#[test]
fn a_device_that_stops_completing_fails_its_link_at_the_deadline_and_the_rest_records() {
    let _serial = one_at_a_time();
    if !uring_here() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let stall = FaultKind::Stall {
        after_bytes: 64 << 10,
    };
    let cfg = RecordConfig {
        completion_deadline: Duration::from_millis(500),
        ..config(out.path(), stall, Duration::from_secs(1))
    };
    let step = cfg.frame_step_ticks();
    // Bounded by the deadline: a wait without one would hang here, and the test binary's
    // own harness would be the only thing to stop it.
    let r = record_within(&cfg);
    let window = window_frames(&r, step);
    let (l0, l1) = (&r.manifest.links[0], &r.manifest.links[1]);
    assert_eq!(l0.state, LinkState::Failed, "{l0:?}");
    let why = l0.error.as_deref().unwrap_or("");
    assert!(
        why.contains("nothing completed within"),
        "the reason is kept: {why}"
    );
    assert!(l0.data.chunks > 0, "what was acknowledged before is kept");
    assert_eq!(
        l0.data.frames + l0.lost_frames,
        window,
        "link 0: its loss is counted"
    );
    assert_eq!(frames_are_the_links(&r, 0, step), l0.data.frames);
    assert_eq!((l1.data.frames, l1.lost_frames), (window, 0), "{l1:?}");
    assert_eq!(l1.state, LinkState::Ok);
}

/// A stall of five buffer lengths, on every method the fault acts on, with one writer for
/// both links (the default for io_uring): the stalled link's window is counted to the frame
/// (durable + lost = the window, which the writer also asserts: no panic), the writer never
/// waits on it for the healthy link, which records its whole window, and the burst seals.
#[test]
fn a_stall_of_several_buffer_lengths_is_counted_to_the_frame_and_holds_no_other_link() {
    let _serial = one_at_a_time();
    for method in [Method::Uring, Method::Direct, Method::Buffered] {
        if method == Method::Uring && !uring_here() {
            continue;
        }
        let out = tempfile::tempdir().unwrap();
        let stall = FaultKind::Stall {
            after_bytes: 64 << 10,
        };
        let buffer = Duration::from_millis(200);
        let cfg = RecordConfig {
            method,
            writers: 1,
            completion_deadline: buffer * 5,
            ..config(out.path(), stall, buffer)
        };
        let step = cfg.frame_step_ticks();
        let r = record_within(&cfg);
        let window = window_frames(&r, step);
        let (l0, l1) = (&r.manifest.links[0], &r.manifest.links[1]);
        assert_eq!(l0.state, LinkState::Failed, "{method}: {l0:?}");
        assert_eq!(
            l0.data.frames + l0.lost_frames,
            window,
            "{method}: link 0, durable + lost"
        );
        assert!(l0.lost_frames > 0, "{method}: the stall lost frames");
        assert_eq!(frames_are_the_links(&r, 0, step), l0.data.frames);
        assert_eq!(
            (l1.data.frames, l1.lost_frames, l1.state),
            (window, 0, LinkState::Ok),
            "{method}: the healthy link, on the same writer, records its whole window"
        );
        assert_eq!(frames_are_the_links(&r, 1, step), window);
    }
}

/// A write that blocks in the kernel and never returns (`hang`: no sink's deadline can cut it
/// short) on the blocking methods: the watchdog gives its writer up, the link is failed with
/// why, its window is counted to the frame, the other link records all of its window, and the
/// burst is sealed without waiting for the stuck thread.
#[test]
fn a_write_stuck_in_the_kernel_is_given_up_by_the_watchdog_and_the_burst_seals() {
    let _serial = one_at_a_time();
    for method in [Method::Direct, Method::Buffered, Method::Msync] {
        let out = tempfile::tempdir().unwrap();
        let hang = FaultKind::Hang {
            after_bytes: 64 << 10,
        };
        let cfg = RecordConfig {
            method,
            completion_deadline: Duration::from_millis(300),
            ..config(out.path(), hang, Duration::from_secs(1))
        };
        let step = cfg.frame_step_ticks();
        let r = record_within(&cfg);
        let window = window_frames(&r, step);
        let (l0, l1) = (&r.manifest.links[0], &r.manifest.links[1]);
        assert_eq!(l0.state, LinkState::Failed, "{method}: {l0:?}");
        assert!(
            l0.error.as_deref().unwrap_or("").contains("watchdog"),
            "{method}: {l0:?}"
        );
        assert_eq!(
            l0.data.frames + l0.lost_frames,
            window,
            "{method}: link 0, durable + lost"
        );
        assert_eq!(frames_are_the_links(&r, 0, step), l0.data.frames);
        assert_eq!(
            (l1.data.frames, l1.lost_frames, l1.state),
            (window, 0, LinkState::Ok),
            "{method}: the other link"
        );
    }
}
