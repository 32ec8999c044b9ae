//! What one recorded burst came to: the sealed manifest, its verification, and how the recording
//! went (rates, loss, CPU), for `snbuf record`'s summary and its `--json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use snbuf_burst::manifest::{FrameInfo, LinkRecord};
use snbuf_burst::{BurstState, Manifest, TriggerInfo, VerifyReport};
use snbuf_readout::udp::IngestSnapshot;

#[derive(Clone, Debug)]
pub struct RecordSummary {
    pub burst_dir: PathBuf,
    pub manifest: Manifest,
    pub verify: VerifyReport,
    pub window: TriggerInfo,
    pub frame_bytes: u32,
    pub input_bytes_per_s: f64,
    /// Bytes made durable per second, from the trigger to the last chunk.
    pub output_bytes_per_s: f64,
    pub frames_recorded: u64,
    pub lost_frames: u64,
    pub buffer_memory_bytes: u64,
    pub buffer_page_bytes: Option<u64>,
    /// Per link, the NUMA node its buffer was placed on (None: one node, or the device's node is
    /// not known; the kernel's default).
    pub buffer_nodes: Vec<Option<u32>>,
    pub durability: String,
    pub survives_power_loss: bool,
    /// Whether the burst's files were prepared before the trigger (else opened at it).
    pub prepared_ahead: bool,
    /// Each link's room when the output could not hold the whole window (bytes; the rest of
    /// the window is counted lost). None: the window fitted.
    pub window_cut_to_bytes_per_link: Option<u64>,
    pub skipped_at_source: u64,
    /// The longest a frame was overdue at the link emulation from the trigger to the window's
    /// end (s): the links ran at their set rate while this stayed a few ms.
    pub source_max_lag_s: f64,
    /// CPU seconds of the writer threads (copy out of the buffers, checksum, persist).
    pub writer_cpu_s: f64,
    /// Writer threads that ran, and chunks whose payload went to a block device straight from
    /// the latency buffers (O_DIRECT from the ring's pages: no copy by the CPU).
    pub writers: usize,
    pub chunks_from_source: u64,
    /// CPU seconds of the links' thread (emulation, or the network receiver) while the window
    /// was recorded, and the bytes it put into the buffers over that same interval.
    pub source_cpu_s: f64,
    pub source_bytes: u64,
    /// CPU seconds of the whole process from the trigger until the writers were joined: the
    /// writers and links above plus every other thread, among them io_uring's kernel workers
    /// (`iou-wrk-*`: ext4 hands O_DIRECT writes into unwritten extents to them), which the
    /// writers' own clocks do not see; in `serve` also export, control and metrics.
    pub process_cpu_s: f64,
    /// With links from the network: per link, what the receiver counted (whole run), and the
    /// socket receive buffer granted.
    pub ingest: Option<Vec<snbuf_readout::udp::IngestSnapshot>>,
    pub ingest_rcvbuf_bytes: Option<usize>,
    /// With links from the network: whether the sockets received coalesced buffers (UDP GRO).
    pub ingest_gro: Option<bool>,
    /// With links from the network: the longest nap between the receiver's poll rounds, the
    /// CPU its thread was pinned to, and the interface holding the bound address.
    pub ingest_nap: Option<std::time::Duration>,
    pub ingest_receive_cpu: Option<usize>,
    pub ingest_nic: Option<snbuf_platform::numa::Nic>,
}

impl RecordSummary {
    /// Core-seconds per GiB recorded, everything the process spent while the window recorded
    /// (ingest, checksum, persist, the kernel's I/O workers).
    pub fn cpu_core_s_per_gib(&self) -> f64 {
        let gib = (self.frames_recorded * self.frame_bytes as u64) as f64 / (1u64 << 30) as f64;
        if gib > 0.0 {
            self.process_cpu_s
                .max(self.writer_cpu_s + self.source_cpu_s)
                / gib
        } else {
            0.0
        }
    }

    /// Core-seconds per GiB the links' thread spent taking data in (receiving it from the
    /// network, or emulating it): its CPU and its bytes over the same interval.
    pub fn source_cpu_core_s_per_gib(&self) -> Option<f64> {
        let gib = self.source_bytes as f64 / (1u64 << 30) as f64;
        (gib > 0.0).then(|| self.source_cpu_s / gib)
    }

    /// Core-seconds per GiB of the whole unit, from the data's arrival to durable on the
    /// medium: the links' thread per GiB it took in, plus everything else the process spent
    /// (writers, checksums, the kernel's I/O workers, control) per GiB recorded. Each part is
    /// over its own consistent interval; the buffering before the trigger, which persists
    /// nothing, is not charged to the recording.
    pub fn unit_cpu_core_s_per_gib(&self) -> Option<f64> {
        let gib = (self.frames_recorded * self.frame_bytes as u64) as f64 / (1u64 << 30) as f64;
        let rest = (self.process_cpu_s - self.source_cpu_s).max(self.writer_cpu_s);
        Some(self.source_cpu_core_s_per_gib()? + rest / (gib > 0.0).then_some(gib)?)
    }

    /// CPU seconds of the process's other threads while the window recorded (see
    /// `process_cpu_s`).
    pub fn other_cpu_s(&self) -> f64 {
        (self.process_cpu_s - self.writer_cpu_s - self.source_cpu_s).max(0.0)
    }
}

/// `snbuf record --json`: one recording, as the benchmark scripts and the published tables read
/// it. Field names are the schema; a new one is added at the end, none is renamed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordResult {
    pub burst_dir: PathBuf,
    pub state: BurstState,
    pub trigger: TriggerInfo,
    pub frame: Option<FrameInfo>,
    pub frame_bytes: u32,
    pub frames_recorded: u64,
    pub lost_frames: u64,
    pub input_bytes_per_s: f64,
    pub output_bytes_per_s: f64,
    pub method: String,
    pub durability: String,
    pub survives_power_loss: bool,
    pub prepared_ahead: bool,
    pub window_cut_to_bytes_per_link: Option<u64>,
    pub buffer_memory_bytes: u64,
    pub buffer_page_bytes: Option<u64>,
    pub buffer_numa_nodes: Vec<Option<u32>>,
    pub skipped_at_source_per_link: u64,
    pub source_max_lag_s: f64,
    pub writer_cpu_s: f64,
    pub writers: usize,
    pub chunks_from_source: u64,
    pub source_cpu_s: f64,
    pub source_bytes: u64,
    pub source_cpu_core_s_per_gib: Option<f64>,
    pub unit_cpu_core_s_per_gib: Option<f64>,
    pub process_cpu_s: f64,
    pub other_cpu_s: f64,
    pub cpu_core_s_per_gib: f64,
    pub links: Vec<LinkRecord>,
    pub ingest: Option<Vec<IngestSnapshot>>,
    pub ingest_gro: Option<bool>,
    pub ingest_rcvbuf_bytes: Option<usize>,
    pub ingest_nap_s: Option<f64>,
    pub ingest_receive_cpu: Option<usize>,
    pub ingest_nic: Option<String>,
    pub ingest_nic_numa_node: Option<u32>,
    pub valid: bool,
    pub problems: Vec<String>,
}

impl RecordSummary {
    /// The summary as `record --json` writes it.
    pub fn result(&self) -> RecordResult {
        let m = &self.manifest;
        assert_eq!(
            self.lost_frames,
            m.links.iter().map(|l| l.lost_frames).sum::<u64>(),
            "the summary's loss is its links'"
        );
        RecordResult {
            burst_dir: self.burst_dir.clone(),
            state: m.state,
            trigger: self.window.clone(),
            frame: m.frame.clone(),
            frame_bytes: self.frame_bytes,
            frames_recorded: self.frames_recorded,
            lost_frames: self.lost_frames,
            input_bytes_per_s: self.input_bytes_per_s,
            output_bytes_per_s: self.output_bytes_per_s,
            method: m.method.clone(),
            durability: self.durability.clone(),
            survives_power_loss: self.survives_power_loss,
            prepared_ahead: self.prepared_ahead,
            window_cut_to_bytes_per_link: self.window_cut_to_bytes_per_link,
            buffer_memory_bytes: self.buffer_memory_bytes,
            buffer_page_bytes: self.buffer_page_bytes,
            buffer_numa_nodes: self.buffer_nodes.clone(),
            skipped_at_source_per_link: self.skipped_at_source,
            source_max_lag_s: self.source_max_lag_s,
            writer_cpu_s: self.writer_cpu_s,
            writers: self.writers,
            chunks_from_source: self.chunks_from_source,
            source_cpu_s: self.source_cpu_s,
            source_bytes: self.source_bytes,
            source_cpu_core_s_per_gib: self.source_cpu_core_s_per_gib(),
            unit_cpu_core_s_per_gib: self.unit_cpu_core_s_per_gib(),
            process_cpu_s: self.process_cpu_s,
            other_cpu_s: self.other_cpu_s(),
            cpu_core_s_per_gib: self.cpu_core_s_per_gib(),
            links: m.links.clone(),
            ingest: self.ingest.clone(),
            ingest_gro: self.ingest_gro,
            ingest_rcvbuf_bytes: self.ingest_rcvbuf_bytes,
            ingest_nap_s: self.ingest_nap.map(|d| d.as_secs_f64()),
            ingest_receive_cpu: self.ingest_receive_cpu,
            ingest_nic: self.ingest_nic.as_ref().map(|n| n.name.clone()),
            ingest_nic_numa_node: self.ingest_nic.as_ref().and_then(|n| n.node),
            valid: self.verify.valid,
            problems: self.verify.problems.clone(),
        }
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
    })
}
