//! What one recorded burst came to: how the recording went (rates, loss, CPU) as `record --json`
//! writes it (`RecordResult`), with the sealed manifest and its verification beside it, for
//! `snbuf record`'s summary.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use snbuf_burst::manifest::{FrameInfo, LinkRecord};
use snbuf_burst::{BurstState, Manifest, VerifyReport, Window};
use snbuf_readout::udp::IngestSnapshot;

/// What `record` shows of one burst: its `record --json` result, with the sealed manifest and
/// its verification beside it, and the receiver's interface as the platform describes it (the
/// result keeps its name and NUMA node).
#[derive(Clone, Debug)]
pub struct RecordSummary {
    pub result: RecordResult,
    pub manifest: Manifest,
    pub verify: VerifyReport,
    pub ingest_nic: Option<snbuf_platform::numa::Nic>,
}

/// `snbuf record --json`: one recording, as the benchmark scripts and the published tables read
/// it. Field names are the schema; a new one is added at the end, none is renamed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordResult {
    pub burst_dir: PathBuf,
    pub state: BurstState,
    pub trigger: Window,
    pub frame: Option<FrameInfo>,
    pub frame_bytes: u32,
    pub frames_recorded: u64,
    pub lost_frames: u64,
    pub input_bytes_per_s: f64,
    /// Bytes made durable per second, from the trigger to the last chunk.
    pub output_bytes_per_s: f64,
    pub method: String,
    pub durability: String,
    pub survives_power_loss: bool,
    /// Whether the burst's files were prepared before the trigger (else opened at it).
    pub prepared_ahead: bool,
    /// Each link's room when the output could not hold the whole window (bytes; the rest of
    /// the window is counted lost). None: the window fitted.
    pub window_cut_to_bytes_per_link: Option<u64>,
    pub buffer_memory_bytes: u64,
    pub buffer_page_bytes: Option<u64>,
    /// Per link, the NUMA node its buffer was placed on (None: one node, or the device's node is
    /// not known; the kernel's default).
    pub buffer_numa_nodes: Vec<Option<u32>>,
    /// Frames the link emulation skipped because it fell behind its rate, per link.
    pub skipped_at_source_per_link: u64,
    /// The longest a frame was overdue at the link emulation from the trigger to the window's
    /// end (s): the links ran at their set rate while this stayed a few ms.
    pub source_max_lag_s: f64,
    /// CPU seconds of the writer threads (copy out of the buffers, checksum, persist).
    pub writer_cpu_s: f64,
    /// Writer threads that ran.
    pub writers: usize,
    /// Chunks whose payload went to a block device straight from the latency buffers (O_DIRECT
    /// from the ring's pages: no copy by the CPU).
    pub chunks_from_source: u64,
    /// CPU seconds of the links' thread (emulation, or the network receiver) while the window
    /// was recorded; `source_bytes` is what it put into the buffers over that same interval.
    pub source_cpu_s: f64,
    pub source_bytes: u64,
    /// Core-seconds per GiB the links' thread spent taking data in.
    pub source_cpu_core_s_per_gib: Option<f64>,
    /// Core-seconds per GiB of the whole unit, from the data's arrival to durable on the medium.
    pub unit_cpu_core_s_per_gib: Option<f64>,
    /// CPU seconds of the whole process from the trigger until the writers were joined: the
    /// writers and links above plus every other thread, among them io_uring's kernel workers
    /// (`iou-wrk-*`: ext4 hands O_DIRECT writes into unwritten extents to them), which the
    /// writers' own clocks do not see; in `serve` also export, control and metrics.
    pub process_cpu_s: f64,
    /// CPU seconds of the process's other threads while the window recorded.
    pub other_cpu_s: f64,
    /// Core-seconds per GiB recorded, all the process spent while the window recorded.
    pub cpu_core_s_per_gib: f64,
    pub links: Vec<LinkRecord>,
    /// With links from the network: per link, what the receiver counted (whole run).
    pub ingest: Option<Vec<IngestSnapshot>>,
    /// With links from the network: whether the sockets received coalesced buffers (UDP GRO).
    pub ingest_gro: Option<bool>,
    /// The socket receive buffer granted.
    pub ingest_rcvbuf_bytes: Option<usize>,
    /// The longest nap between the receiver's poll rounds (s), the CPU its thread was pinned to,
    /// and the interface holding the bound address with its NUMA node.
    pub ingest_nap_s: Option<f64>,
    pub ingest_receive_cpu: Option<usize>,
    pub ingest_nic: Option<String>,
    pub ingest_nic_numa_node: Option<u32>,
    pub valid: bool,
    pub problems: Vec<String>,
}

/// A link emulation later than this behind its schedule is worth saying: at the default rates it
/// sleeps 1 ms between rounds, so a few ms is normal scheduling.
pub const SOURCE_LAG_WORTH_SAYING_S: f64 = 0.010;

impl RecordResult {
    /// Whether the link emulation fell behind its schedule by more than scheduling explains
    /// (`SOURCE_LAG_WORTH_SAYING_S`): then the links ran slower than set for a while.
    pub fn source_lag_worth_saying(&self) -> bool {
        self.source_max_lag_s > SOURCE_LAG_WORTH_SAYING_S
    }

    /// Fills in the CPU figures derived from the measured ones (`source_cpu_s`, `writer_cpu_s`,
    /// `process_cpu_s`, the bytes): each is computed here once.
    pub(crate) fn with_cpu_figures(mut self) -> Self {
        // A figure, not the data: checked in debug builds only, never failing a burst.
        debug_assert!(
            self.source_cpu_s >= 0.0 && self.writer_cpu_s >= 0.0 && self.process_cpu_s >= 0.0,
            "CPU time only grows"
        );
        let recorded_gib =
            (self.frames_recorded * self.frame_bytes as u64) as f64 / (1u64 << 30) as f64;
        let source_gib = self.source_bytes as f64 / (1u64 << 30) as f64;
        // Everything the process spent while the window recorded (ingest, checksum, persist,
        // the kernel's I/O workers), per GiB recorded.
        self.cpu_core_s_per_gib = if recorded_gib > 0.0 {
            self.process_cpu_s
                .max(self.writer_cpu_s + self.source_cpu_s)
                / recorded_gib
        } else {
            0.0
        };
        // The links' thread taking data in (receiving it, or emulating it): its CPU and its
        // bytes over the same interval.
        self.source_cpu_core_s_per_gib = (source_gib > 0.0).then(|| self.source_cpu_s / source_gib);
        // The whole unit, from the data's arrival to durable on the medium: the links' thread
        // per GiB it took in, plus everything else the process spent per GiB recorded. Each
        // part is over its own consistent interval; the buffering before the trigger, which
        // persists nothing, is not charged to the recording.
        let rest = (self.process_cpu_s - self.source_cpu_s).max(self.writer_cpu_s);
        self.unit_cpu_core_s_per_gib = self
            .source_cpu_core_s_per_gib
            .zip((recorded_gib > 0.0).then_some(recorded_gib))
            .map(|(source, gib)| source + rest / gib);
        // The process's other threads while the window recorded (see `process_cpu_s`).
        self.other_cpu_s = (self.process_cpu_s - self.writer_cpu_s - self.source_cpu_s).max(0.0);
        debug_assert!(
            self.cpu_core_s_per_gib >= 0.0 && self.unit_cpu_core_s_per_gib.is_none_or(|c| c >= 0.0),
            "CPU per GiB is not negative"
        );
        self
    }
}

/// Reads the sealed burst in `dir` back (`verify_burst`) and notes the verdict in its
/// manifest; except when links were `abandoned` (their device stopped answering): reading
/// their files could hang this thread as it hung their writer, so the burst is left for
/// `snbuf verify` once the device is back, and said not verified.
pub(crate) fn verify_sealed(
    dir: &std::path::Path,
    manifest: &mut snbuf_burst::Manifest,
    abandoned: &[u32],
) -> Result<snbuf_burst::VerifyReport, crate::error::RecordError> {
    debug_assert!(
        abandoned
            .iter()
            .all(|&l| (l as usize) < manifest.links.len()),
        "the links abandoned are the burst's"
    );
    if abandoned.is_empty() {
        let verify = snbuf_burst::verify_burst(dir)?;
        if let Err(e) = snbuf_burst::verify::note_verified(dir, manifest, &verify) {
            tracing::warn!("noting the verification: {e}");
        }
        return Ok(verify);
    }
    Ok(snbuf_burst::VerifyReport {
        dir: dir.display().to_string(),
        burst_id: Some(manifest.burst_id.clone()),
        state: Some(manifest.state),
        links: Vec::new(),
        problems: vec![format!(
            "not read back: the device of link(s) {abandoned:?} stopped answering; run \
             `snbuf verify` once it is back"
        )],
        valid: false,
        triggers: Vec::new(),
        injected_faults: manifest.injected_faults.clone(),
    })
}
