//! What one recorded burst came to: the sealed manifest, its verification, and how the recording
//! went (rates, loss, CPU), for `snbuf record`'s summary and its `--json`.

use std::path::PathBuf;

use snbuf_burst::{Manifest, TriggerInfo, VerifyReport};

#[derive(Clone, Debug)]
pub struct RecordReport {
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

impl RecordReport {
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
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "snbuf: noting the verification: {e}");
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
