//! Acknowledged means recovered (docs/DESIGN.md's durability contract, points 1 and 2).
//!
//! Random workloads (links, frame sizes, chunk sizes, block or mapped media; on block media
//! payloads of whole sectors, written in place before their header block, and others, copied
//! behind it) are written through
//! the chunk writer to simulated media whose power is cut at a random call; each pending write is
//! then dropped, kept or torn by a seeded RNG; `recover` runs on the resulting files. Checked:
//! every acknowledged chunk is present and intact, every chunk returned is exactly one that was
//! written (no bad checksum is ever returned as data), recovery is idempotent, and the recovered
//! burst verifies. Chunks are acknowledged one at a time or a group (up to 4) per persist.
//! 250 workloads x 4 crash seeds = 1000 crash points per run; proptest prints the
//! failing workload and seed so it can be replayed.

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use snbuf_burst::manifest::link_file_name;
use snbuf_burst::{recover_burst, scan, verify_burst, ChunkWriter, Expect};
use snbuf_persist::sim::{SimKind, SimMedium, SimSink};

#[derive(Clone, Debug)]
struct Workload {
    mapped: bool,
    links: u32,
    frame_bytes: u32,
    frames_per_chunk: Vec<u32>,
    /// Per link: the call at which the power goes (may be after the last).
    power_cut_at: Vec<u64>,
    /// Chunks appended per persist (1: every chunk acknowledged on its own).
    group: u64,
    crash_seeds: [u64; 4],
}

fn workload() -> impl Strategy<Value = Workload> {
    (
        any::<bool>(),
        1u32..=3,
        // 512 and 2048 B frames make payloads of whole sectors: written in place, header block
        // after (format version 2); the others go through the staging copy.
        prop::sample::select(vec![64u32, 100, 464, 512, 2048, 5568]),
        prop::collection::vec(1u32..=6, 1..=10),
        prop::collection::vec(1u64..=40, 3),
        any::<[u64; 4]>(),
        1u64..=4,
    )
        .prop_map(
            |(mapped, links, frame_bytes, frames_per_chunk, power_cut_at, crash_seeds, group)| {
                Workload {
                    mapped,
                    links,
                    frame_bytes,
                    frames_per_chunk,
                    power_cut_at,
                    group,
                    crash_seeds,
                }
            },
        )
}

fn payload(link: u32, seq: u64, bytes: usize) -> Vec<u8> {
    snbuf_platform::rng::Rng::new((link as u64) << 32 | seq).bytes(bytes)
}

struct LinkRun {
    medium: Arc<Mutex<SimMedium>>,
    /// Every chunk attempted, by sequence: (first ts, payload).
    attempted: Vec<Vec<u8>>,
    acked: u64,
}

fn run_link(w: &Workload, link: u32) -> LinkRun {
    let kind = if w.mapped {
        SimKind::Mapped
    } else {
        SimKind::Block { sector_bytes: 512 }
    };
    let max_payload = 6 * w.frame_bytes as usize;
    let region = (w.frames_per_chunk.len() as u64 + 1) * (max_payload as u64 + 1024);
    let (sink, medium) = SimSink::new(kind, region.div_ceil(512) * 512, vec![]);
    medium
        .lock()
        .unwrap()
        .cut_power_at_call(w.power_cut_at[link as usize]);
    let mut writer = ChunkWriter::new(sink, link, w.frame_bytes, max_payload).unwrap();
    let mut attempted = Vec::new();
    let mut acked = 0;
    let mut ts = 1000u64;
    for (seq, &frames) in w.frames_per_chunk.iter().enumerate() {
        let p = payload(link, seq as u64, (frames * w.frame_bytes) as usize);
        attempted.push(p.clone());
        let first = ts;
        let last = ts + (frames as u64 - 1) * 25;
        ts = last + 25;
        // Chunks are appended and acknowledged a group at a time: only a persist that returned
        // acknowledges (everything appended before it).
        match writer.append_chunk(first, last, &p) {
            Ok(sequence) => assert_eq!(sequence, seq as u64),
            Err(_) => break, // the power is gone; nothing after this was acknowledged
        }
        let last_of_group =
            (seq as u64 + 1).is_multiple_of(w.group) || seq + 1 == w.frames_per_chunk.len();
        if last_of_group {
            match writer.persist_appended() {
                Ok(_) => acked = writer.totals().chunks,
                Err(_) => break,
            }
        }
    }
    LinkRun {
        medium,
        attempted,
        acked,
    }
}

fn check(w: &Workload) -> Result<(), TestCaseError> {
    let runs: Vec<LinkRun> = (0..w.links).map(|l| run_link(w, l)).collect();
    for &seed in &w.crash_seeds {
        let dir = tempfile::tempdir().unwrap();
        for (link, run) in runs.iter().enumerate() {
            let image = run.medium.lock().unwrap().crash(seed);
            if w.mapped {
                // On memory the payload is fenced before its header: a crash can leave payload
                // bytes without a header, never a header whose payload checksum fails.
                let r = scan(
                    &image[..],
                    Expect {
                        link: Some(link as u32),
                        frame_step_ticks: None,
                        frame: None,
                    },
                )
                .unwrap();
                let why = match &r.end {
                    snbuf_burst::End::TornTail { why, .. }
                    | snbuf_burst::End::BadChunk { why, .. } => why.clone(),
                    _ => String::new(),
                };
                prop_assert!(
                    !why.contains("payload checksum"),
                    "link {link} seed {seed}: a durable header without its payload: {why}"
                );
            }
            std::fs::write(dir.path().join(link_file_name(link as u32)), image).unwrap();
        }
        let first =
            recover_burst(dir.path(), false).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let again =
            recover_burst(dir.path(), false).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(
            !again.changed && again.dropped.is_empty(),
            "recovery is not idempotent (seed {seed}): {again:?}"
        );
        for (link, run) in runs.iter().enumerate() {
            let bytes = std::fs::read(dir.path().join(link_file_name(link as u32))).unwrap();
            let report = scan(
                &bytes[..],
                Expect {
                    link: Some(link as u32),
                    frame_step_ticks: Some(25),
                    frame: None,
                },
            )
            .unwrap();
            prop_assert!(
                report.is_clean(),
                "recovered file does not end cleanly: {:?}",
                report.end
            );
            prop_assert!(
                report.chunks.len() as u64 >= run.acked,
                "link {link} seed {seed}: {} acknowledged chunk(s), {} recovered",
                run.acked,
                report.chunks.len()
            );
            for c in &report.chunks {
                let start = (c.offset + c.payload_offset) as usize;
                let data = &bytes[start..start + c.payload_bytes as usize];
                let written = &run.attempted[c.sequence as usize];
                prop_assert!(
                    data == written.as_slice(),
                    "link {link} seed {seed}: chunk {} differs from what was written",
                    c.sequence
                );
            }
        }
        let v = verify_burst(dir.path()).unwrap();
        prop_assert!(
            v.valid,
            "recovered burst does not verify (seed {seed}): {:?} {:?}",
            v.problems,
            v.links
        );
        drop(first);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 250,
        // The minimal failing workload (seeds included) is printed; that is the replay recipe.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn acknowledged_chunks_survive_any_crash(w in workload()) {
        check(&w)?;
    }
}
