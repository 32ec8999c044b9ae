//! What the network receiver counts per link, as it happens, and a copy at one moment.

use std::sync::atomic::{AtomicU64, Ordering};

/// One link's ingest, counted as it happens.
#[derive(Debug, Default)]
pub struct IngestCounters {
    pub frames: AtomicU64,
    pub bytes: AtomicU64,
    /// Drops the kernel counted on this link's socket (its receive buffer was full): datagrams,
    /// or with GRO whole coalesced buffers of several frames each. The frames lost are the
    /// timestamp gaps below.
    pub kernel_drops: AtomicU64,
    /// Frames missing by the link's sequence numbers, and by its timestamps.
    pub sequence_gap_frames: AtomicU64,
    pub timestamp_gap_frames: AtomicU64,
    /// Datagrams dropped: older than the frame before, shorter or longer than a frame, with
    /// another header version, of a stream no link takes.
    pub out_of_order: AtomicU64,
    pub short: AtomicU64,
    pub long: AtomicU64,
    pub bad_version: AtomicU64,
    pub unknown_stream: AtomicU64,
    /// Frames whose timestamp lay implausibly far ahead (see `UdpSource::max_jump_ticks`).
    pub implausible_timestamp: AtomicU64,
    /// This link's frames that the kernel queued on another link's socket (its BPF routing fell
    /// back to the group's hash), moved here: kept if still in time order, else out_of_order.
    /// Not loss in itself; a steady count says the routing program is not doing its job.
    pub rerouted: AtomicU64,
    /// Messages received (a datagram, or a coalesced buffer with UDP GRO), and those of them
    /// that carried more than one frame: frames / receives is the frames each message moved.
    pub receives: AtomicU64,
    pub coalesced: AtomicU64,
    /// System calls that received data (each took one message or several): frames /
    /// receive_calls is the frames each crossing into the kernel moved.
    pub receive_calls: AtomicU64,
    /// Coalesced buffers larger than the slots offered (the kernel cut them): the frames cut
    /// off are missing by sequence number and timestamp, and counted there.
    pub truncated: AtomicU64,
}

/// A link's ingest counters at one moment, as they go on the wire: `snbuf status`, the status
/// file, `record --json`'s `ingest` and the metrics all carry this type as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IngestSnapshot {
    pub frames: u64,
    pub bytes: u64,
    pub kernel_drops: u64,
    pub sequence_gap_frames: u64,
    pub timestamp_gap_frames: u64,
    pub rerouted: u64,
    /// Messages received (datagrams or coalesced buffers), those that carried a coalesced
    /// buffer of several frames (UDP GRO), the system calls that received them, and coalesced
    /// buffers the kernel cut short.
    #[serde(default)]
    pub receives: u64,
    #[serde(default)]
    pub coalesced: u64,
    #[serde(default)]
    pub receive_calls: u64,
    #[serde(default)]
    pub truncated: u64,
    pub dropped: DroppedDatagrams,
}

/// Datagrams of a link the receiver dropped, by reason (see `IngestCounters`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DroppedDatagrams {
    pub out_of_order: u64,
    pub short: u64,
    pub long: u64,
    pub bad_version: u64,
    pub unknown_stream: u64,
    pub implausible_timestamp: u64,
}

impl IngestCounters {
    pub fn snapshot(&self) -> IngestSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IngestSnapshot {
            frames: g(&self.frames),
            bytes: g(&self.bytes),
            kernel_drops: g(&self.kernel_drops),
            sequence_gap_frames: g(&self.sequence_gap_frames),
            timestamp_gap_frames: g(&self.timestamp_gap_frames),
            rerouted: g(&self.rerouted),
            receives: g(&self.receives),
            coalesced: g(&self.coalesced),
            receive_calls: g(&self.receive_calls),
            truncated: g(&self.truncated),
            dropped: DroppedDatagrams {
                out_of_order: g(&self.out_of_order),
                short: g(&self.short),
                long: g(&self.long),
                bad_version: g(&self.bad_version),
                unknown_stream: g(&self.unknown_stream),
                implausible_timestamp: g(&self.implausible_timestamp),
            },
        }
    }
}

impl DroppedDatagrams {
    /// Datagrams that reached snbuf and were dropped, for whatever reason.
    pub fn total(&self) -> u64 {
        self.out_of_order
            + self.short
            + self.long
            + self.bad_version
            + self.unknown_stream
            + self.implausible_timestamp
    }
}
