//! `verify` and `recover` on damaged bursts: an empty directory, a missing manifest, a truncated
//! file, one flipped payload byte, one flipped header byte, a chunk from a future version. verify
//! never changes a byte; recover keeps exactly the valid prefix and says what it dropped.

mod common;

use common::*;
use snbuf_burst::manifest::link_file_name;
use snbuf_burst::{recover_burst, verify_burst, BurstState, End, Manifest, HEADER_BYTES};

fn link0(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(link_file_name(0))
}

#[test]
fn a_good_burst_verifies_and_recovery_changes_nothing() {
    let dir = write_burst(2);
    let before = snapshot(dir.path());
    let v = verify_burst(dir.path()).unwrap();
    assert!(v.valid, "{v:?}");
    assert_eq!(v.links.len(), 2);
    assert_eq!(v.links[0].chunks, CHUNKS);
    let c = v.links[0].coverage.as_ref().unwrap();
    assert_eq!(c.frames_present, c.frames_in_window);
    assert_eq!(snapshot(dir.path()), before, "verify changed nothing");
    let r = recover_burst(dir.path(), false).unwrap();
    assert!(!r.changed && r.dropped.is_empty(), "{r:?}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn an_empty_directory_is_not_a_valid_burst_and_is_not_recovered_into_one() {
    let dir = tempfile::tempdir().unwrap();
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    assert!(
        recover_burst(dir.path(), false).is_err(),
        "nothing to recover from"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was created"
    );
}

#[test]
fn a_missing_directory_is_a_usage_error() {
    assert!(verify_burst(std::path::Path::new("/nonexistent/burst")).is_err());
    assert!(recover_burst(std::path::Path::new("/nonexistent/burst"), false).is_err());
}

#[test]
fn a_missing_manifest_is_reported_and_rebuilt_from_the_data() {
    let dir = write_burst(2);
    std::fs::remove_file(dir.path().join("manifest.json")).unwrap();
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    assert!(
        v.problems.iter().any(|p| p.contains("no manifest")),
        "{:?}",
        v.problems
    );
    let dry = recover_burst(dir.path(), true).unwrap();
    assert!(
        dry.manifest_rebuilt && !dir.path().join("manifest.json").exists(),
        "dry run writes nothing"
    );
    let r = recover_burst(dir.path(), false).unwrap();
    assert!(r.manifest_rebuilt && r.dropped.is_empty());
    let v = verify_burst(dir.path()).unwrap();
    assert!(v.valid, "{v:?}");
    assert_eq!(v.links[1].frames, CHUNKS * FRAMES_PER_CHUNK as u64);
}

#[test]
fn a_truncated_file_loses_only_its_torn_tail() {
    let dir = write_burst(1);
    let m = dir.manifest.clone();
    let len = m.links[0].data.file_bytes;
    // Cut into the middle of the last chunk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(link0(dir.path()))
        .unwrap()
        .set_len(len - 3000)
        .unwrap();
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    assert!(
        matches!(v.links[0].end, Some(End::TornTail { .. })),
        "{:?}",
        v.links[0].end
    );
    let r = recover_burst(dir.path(), false).unwrap();
    assert_eq!(r.links[0].kept_chunks, CHUNKS - 1);
    assert_eq!(r.dropped.len(), 1);
    // The window is now short of the last chunk's frames: recovery counts them lost (the
    // manifest says so, with the region it dropped), and the burst verifies as what it is.
    let v = verify_burst(dir.path()).unwrap();
    assert_eq!(v.links[0].chunks, CHUNKS - 1);
    let after = Manifest::read(dir.path()).unwrap();
    assert_eq!(after.state, BurstState::Recovered);
    let cov = v.links[0].coverage.clone().unwrap();
    assert!(cov.frames_present < cov.frames_in_window);
    assert_eq!(
        after.links[0].lost_frames,
        m.links[0].lost_frames + cov.frames_in_window - cov.frames_present
    );
    assert!(v.valid, "{:?}", v.links[0].problems);
    assert!(after.recovery.unwrap().contains("1 region(s) dropped"));
}

#[test]
fn one_flipped_payload_byte_is_found_with_its_offset() {
    let dir = write_burst(1);
    let path = link0(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let stride = bytes.len() / CHUNKS as usize;
    let header = snbuf_burst::ChunkHeader::decode(&bytes[..HEADER_BYTES]).unwrap();
    let at = 2 * stride + header.payload_offset() as usize + 100; // inside chunk 2's payload
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(dir.path());
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    match &v.links[0].end {
        Some(End::BadChunk { offset, why, .. }) => {
            assert_eq!(*offset, 2 * stride as u64);
            assert!(why.contains("payload checksum"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        v.links[0].chunks, 2,
        "only the chunks before the bad one are data"
    );
    assert_eq!(snapshot(dir.path()), before, "verify changed nothing");
    let r = recover_burst(dir.path(), false).unwrap();
    assert_eq!(r.links[0].kept_chunks, 2);
    assert_eq!(r.dropped[0].offset, 2 * stride as u64);
    assert!(
        r.dropped[0].why.contains("3 valid chunk(s) after it"),
        "{}",
        r.dropped[0].why
    );
}

#[test]
fn one_flipped_header_byte_ends_the_data_there() {
    let dir = write_burst(1);
    let path = link0(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let stride = bytes.len() / CHUNKS as usize;
    bytes[4 * stride + 20] ^= 0x80; // chunk 4's sequence field
    std::fs::write(&path, &bytes).unwrap();
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    assert_eq!(v.links[0].chunks, 4);
    let r = recover_burst(dir.path(), false).unwrap();
    assert_eq!(r.links[0].kept_chunks, 4);
    assert_eq!(r.dropped[0].offset, 4 * stride as u64);
}

#[test]
fn a_chunk_from_a_future_version_is_reported_and_never_changed() {
    let dir = write_burst(1);
    let path = link0(dir.path());
    let mut bytes = std::fs::read(&path).unwrap();
    let stride = bytes.len() / CHUNKS as usize;
    let at = 3 * stride;
    // The next version with a correct header checksum: a newer snbuf wrote it.
    let future = snbuf_burst::FORMAT_VERSION + 1;
    bytes[at + 8..at + 10].copy_from_slice(&future.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[at..at + 60]);
    bytes[at + 60..at + 64].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let before = snapshot(dir.path());
    let v = verify_burst(dir.path()).unwrap();
    assert!(!v.valid);
    assert!(
        matches!(v.links[0].end, Some(End::FutureVersion { version, .. }) if version == future),
        "{:?}",
        v.links[0].end
    );
    let e = recover_burst(dir.path(), false).unwrap_err();
    assert!(e.to_string().contains("newer than this snbuf"), "{e}");
    assert_eq!(
        snapshot(dir.path()),
        before,
        "recover refused and changed nothing"
    );
}

#[test]
fn a_future_manifest_is_left_alone() {
    let dir = write_burst(1);
    let p = dir.path().join("manifest.json");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"format_version\": 2", "\"format_version\": 9");
    std::fs::write(&p, text).unwrap();
    let before = snapshot(dir.path());
    assert!(!verify_burst(dir.path()).unwrap().valid);
    assert!(recover_burst(dir.path(), false).is_err());
    assert_eq!(snapshot(dir.path()), before);
}

/// A chunk whose checksum holds but whose frames carry other timestamps than its header says
/// (written with the wrong header, or from the wrong bytes) is not data: verify names it, and
/// recover keeps what comes before it.
#[test]
fn a_frame_whose_timestamp_disagrees_with_its_chunk_header_is_caught() {
    use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo};
    use snbuf_persist::{open, Method, SinkConfig};
    let root = tempfile::tempdir().unwrap();
    let spec = BurstSpec {
        burst_id: "inner".into(),
        frame: FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: FRAME_BYTES,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger: None,
        method: "direct".into(),
        links: vec![0],
        max_payload_bytes: (FRAME_BYTES * FRAMES_PER_CHUNK) as usize,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    };
    let mut w = BurstWriter::create(root.path(), spec, |_, path| {
        open(&SinkConfig::new(Method::Direct, path, 1 << 20))
    })
    .unwrap();
    let span = (FRAMES_PER_CHUNK as u64 - 1) * TICKS_PER_FRAME;
    let next = FIRST_TS + FRAMES_PER_CHUNK as u64 * TICKS_PER_FRAME;
    w.write_chunk(0, FIRST_TS, FIRST_TS + span, &frames(0, 0, FIRST_TS))
        .unwrap();
    // The second chunk's header says `next`, its frames say 300 ticks later.
    w.write_chunk(0, next, next + span, &frames(0, 1, next + TICKS_PER_FRAME))
        .unwrap();
    w.write_chunk(
        0,
        next + span + TICKS_PER_FRAME,
        next + 2 * span + TICKS_PER_FRAME,
        &frames(0, 2, next + span + TICKS_PER_FRAME),
    )
    .unwrap();
    let dir = w.dir().to_path_buf();
    w.seal().unwrap();
    let v = verify_burst(&dir).unwrap();
    assert!(!v.valid);
    let problems = v.links[0].problems.join("; ");
    assert!(
        problems.contains("disagrees with its chunk header"),
        "{problems}"
    );
    assert_eq!(v.links[0].chunks, 1, "the prefix before it");
    let r = recover_burst(&dir, false).unwrap();
    assert_eq!(r.links[0].kept_chunks, 1);
    assert!(verify_burst(&dir).unwrap().valid);
}

/// Bursts recorded before frames were kept in their own layout (manifest version 1) had snbuf's
/// timestamp at bytes 0..8 of every frame: they still verify, read that way.
#[test]
fn a_version_1_burst_is_read_with_its_timestamps_at_bytes_0_to_8() {
    let dir = write_burst(1);
    // Rewrite link 0's frames as a version-1 recorder wrote them: timestamp at bytes 0..8.
    let path = dir.path().join(snbuf_burst::manifest::link_file_name(0));
    let mut bytes = std::fs::read(&path).unwrap();
    let m = dir.manifest.clone();
    let mut offset = 0usize;
    for seq in 0..CHUNKS {
        let first = FIRST_TS + seq * FRAMES_PER_CHUNK as u64 * TICKS_PER_FRAME;
        let mut payload = frames(0, seq, first);
        for (k, f) in payload.chunks_exact_mut(FRAME_BYTES as usize).enumerate() {
            // Timestamp at 0..8, and snbuf's frame counter at 8..16, as version 1 had them.
            f[..8].copy_from_slice(&(first + k as u64 * TICKS_PER_FRAME).to_le_bytes());
            f[8..16].copy_from_slice(&(seq * 4 + k as u64).to_le_bytes());
        }
        let h = snbuf_burst::ChunkHeader::decode(&bytes[offset..offset + HEADER_BYTES]).unwrap();
        let h = snbuf_burst::ChunkHeader {
            payload_crc32c: snbuf_burst::chunk::crc32c(&payload),
            ..h
        };
        bytes[offset..offset + HEADER_BYTES].copy_from_slice(&h.encode());
        let at = offset + h.payload_offset() as usize;
        bytes[at..at + payload.len()].copy_from_slice(&payload);
        offset += h.stride_bytes as usize;
    }
    std::fs::write(&path, &bytes).unwrap();
    assert!(
        !verify_burst(dir.path()).unwrap().valid,
        "read as version 2 these frames disagree with their headers"
    );
    let v1 = Manifest {
        format_version: 1,
        ..m
    };
    v1.write_atomic(dir.path()).unwrap();
    let v = verify_burst(dir.path()).unwrap();
    assert!(v.valid, "{:?} {:?}", v.problems, v.links[0].problems);
}

/// --max-burst chains: a burst stopped while recording names a next burst that may never have
/// been made (the unit died first); recovery drops that name. A sealed burst's next one was
/// started before it sealed: its name stays whether or not the directory is beside it (exported
/// and deleted, or this burst copied elsewhere).
#[test]
fn recovery_drops_only_a_continuation_a_stopped_recording_never_made() {
    let rebuilt_with = |state: BurstState, next_made: bool| -> Manifest {
        let dir = write_burst(1);
        let mut m = Manifest::read(dir.path()).unwrap();
        m.state = state;
        m.continued_in = Some("test-burst-2".into());
        m.write_atomic(dir.path()).unwrap();
        if next_made {
            std::fs::create_dir(dir.path().parent().unwrap().join("test-burst-2")).unwrap();
        }
        // A torn tail: the manifest is rebuilt.
        let len = std::fs::metadata(link0(dir.path())).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(link0(dir.path()))
            .unwrap()
            .set_len(len - 3000)
            .unwrap();
        let r = recover_burst(dir.path(), false).unwrap();
        assert!(r.manifest_rebuilt);
        Manifest::read(dir.path()).unwrap()
    };
    let stopped = rebuilt_with(BurstState::Recording, false);
    assert_eq!(stopped.continued_in, None);
    assert!(
        stopped
            .recovery
            .as_deref()
            .unwrap()
            .contains("test-burst-2 was never made"),
        "{:?}",
        stopped.recovery
    );
    let made = rebuilt_with(BurstState::Recording, true);
    assert_eq!(made.continued_in.as_deref(), Some("test-burst-2"));
    for state in [
        BurstState::Sealed,
        BurstState::Failed,
        BurstState::Recovered,
    ] {
        let m = rebuilt_with(state, false);
        assert_eq!(m.continued_in.as_deref(), Some("test-burst-2"), "{state:?}");
        assert!(!m.recovery.unwrap().contains("never made"));
    }
}
