//! A failed fsync or write fails its link only: latched (never retried as if it worked), the
//! link marked failed in the manifest with an error naming the link, the operation and the file,
//! while the other links record to the end (docs/DESIGN.md's durability contract, point 3).

use snbuf_burst::{
    verify_burst, BurstSpec, BurstState, BurstWriter, FrameInfo, LinkState, WriteError,
};
use snbuf_persist::sim::{Fault, FaultOp, SimKind, SimSink};

fn spec(id: &str) -> BurstSpec {
    BurstSpec {
        burst_id: id.into(),
        frame: FrameInfo {
            frame_type: "custom".into(),
            frame_bytes: 464,
            ticks_per_frame: 25,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger: None,
        method: "direct".into(),
        links: vec![0, 1, 2],
        max_payload_bytes: 4 * 464,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    }
}

fn run(fault_link: u32, fault: Fault) -> (tempfile::TempDir, snbuf_burst::Manifest, Vec<String>) {
    let out = tempfile::tempdir().unwrap();
    let mut w = BurstWriter::create(out.path(), spec("b"), |link, path| {
        let faults = if link == fault_link {
            vec![fault]
        } else {
            vec![]
        };
        Ok(
            SimSink::new(SimKind::Block { sector_bytes: 512 }, 1 << 20, faults)
                .0
                .with_path(path),
        )
    })
    .unwrap();
    let mut errors = Vec::new();
    for seq in 0..10u64 {
        for index in 0..3 {
            let ts = seq * 4 * 25;
            match w.write_chunk(index, ts, ts + 75, &[seq as u8; 4 * 464]) {
                Ok(_) => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    let m = w.seal().unwrap();
    (out, m, errors)
}

#[test]
fn a_failed_fsync_fails_only_its_link() {
    // Calls alternate write, persist: call 6 is the third chunk's fdatasync.
    let (out, m, errors) = run(
        1,
        Fault {
            at_call: 6,
            op: FaultOp::Persist,
            errno: libc::EIO,
        },
    );
    assert_eq!(m.state, BurstState::Failed);
    let l1 = &m.links[1];
    assert_eq!(l1.state, LinkState::Failed);
    assert_eq!(
        l1.data.chunks, 2,
        "two chunks were acknowledged before the failed fsync"
    );
    let e = l1.error.as_deref().unwrap();
    assert!(
        e.contains("link 1")
            && e.contains("fdatasync")
            && e.contains("link-0001.dat")
            && e.contains("Input/output error"),
        "{e}"
    );
    for i in [0, 2] {
        assert_eq!(m.links[i].state, LinkState::Ok);
        assert_eq!(m.links[i].data.chunks, 10, "the other links went on");
    }
    // One error for the failure itself, then refusals: the failed fsync is never retried.
    assert!(errors[0].contains("fdatasync"), "{errors:?}");
    assert!(
        errors[1..].iter().all(|e| e.contains("no more chunks")),
        "{errors:?}"
    );
    let on_disk = snbuf_burst::Manifest::read(&out.path().join("b")).unwrap();
    assert_eq!(on_disk, m);
    let v = verify_burst(&out.path().join("b")).unwrap();
    assert!(
        !v.valid && v.problems.iter().any(|p| p.contains("failed")),
        "{:?}",
        v.problems
    );
}

#[test]
fn a_full_medium_fails_only_its_link() {
    let (_out, m, errors) = run(
        2,
        Fault {
            at_call: 9,
            op: FaultOp::Write,
            errno: libc::ENOSPC,
        },
    );
    assert_eq!(m.links[2].state, LinkState::Failed);
    assert_eq!(m.links[2].data.chunks, 4);
    assert!(
        m.links[2]
            .error
            .as_deref()
            .unwrap()
            .contains("no space left"),
        "{:?}",
        m.links[2].error
    );
    assert_eq!(m.links[0].data.chunks, 10);
    assert!(!errors.is_empty());
}

#[test]
fn burst_ids_cannot_escape_the_output_directory() {
    let out = tempfile::tempdir().unwrap();
    for id in ["../evil", "a/b", "..", "", ".", ".snbuf-next-1-0"] {
        let r = BurstWriter::create(out.path(), spec(id), |_, p| {
            Ok(SimSink::new(SimKind::Mapped, 4096, vec![]).0.with_path(p))
        });
        assert!(r.is_err(), "{id:?} accepted");
    }
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    BurstWriter::create(out.path(), spec("ok"), |_, p| {
        Ok(SimSink::new(SimKind::Mapped, 4096, vec![]).0.with_path(p))
    })
    .unwrap();
    let again = BurstWriter::create(out.path(), spec("ok"), |_, p| {
        Ok(SimSink::new(SimKind::Mapped, 4096, vec![]).0.with_path(p))
    });
    assert!(again.is_err(), "a burst is never written over another");
}

#[test]
fn a_chunk_of_partial_frames_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let mut w = BurstWriter::create(out.path(), spec("p"), |_, p| {
        Ok(SimSink::new(SimKind::Mapped, 1 << 16, vec![])
            .0
            .with_path(p))
    })
    .unwrap();
    // The manifest states what a persist achieves from its first write, while still recording.
    let recording = snbuf_burst::Manifest::read(&out.path().join("p")).unwrap();
    assert_eq!(recording.state, BurstState::Recording);
    assert_eq!(
        recording.durability, "map_sync",
        "the simulated mapped medium stands for DAX"
    );
    assert!(matches!(
        w.write_chunk(0, 0, 0, &[1u8; 100]),
        Err(WriteError::BadChunk { .. })
    ));
    assert!(!w.link_failed(0), "a refused chunk does not fail the link");
    w.write_chunk(0, 0, 0, &[1u8; 464]).unwrap();
    assert_eq!(w.seal().unwrap().state, BurstState::Sealed);
}
