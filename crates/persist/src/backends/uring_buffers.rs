//! Registering an io_uring sink's memory with the kernel (fixed buffers): its staging slots,
//! and the latency buffer its in-place writes come from. A registered buffer's pages are pinned
//! once, at registration, instead of by every request that reads them.

use std::ops::Range;
use std::sync::Arc;

use io_uring::IoUring;

use crate::sink::{HeldMemory, SourceMemory};
use snbuf_platform::memory::AlignedBuf;

/// The kernel caps one registered buffer at 1 GiB.
const MAX_REGISTERED_BYTES: usize = 1 << 30;
/// In the sink's notes when `SinkConfig::source` could not be registered (and why follows).
pub const SOURCE_NOT_REGISTERED: &str = "the latency buffer is not registered with io_uring";
/// The registered-buffer index of `SinkConfig::source` (the slots are 0).
pub(crate) const SOURCE_BUFFER_INDEX: u16 = 1;

/// RLIMIT_MEMLOCK as it was, its soft limit raised to the hard one first where `need` bytes to pin
/// are more than it allows (pinned pages count against it).
fn raise_memlock_for(need: u64) -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0
            && lim.rlim_cur < need
            && lim.rlim_max > lim.rlim_cur
        {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised);
        }
    }
    debug_assert!(
        lim.rlim_cur <= lim.rlim_max,
        "a soft limit within its hard one"
    );
    lim
}

/// Registers the slot buffer and, where given, the source memory in-place writes come from,
/// raising RLIMIT_MEMLOCK's soft limit to its hard limit first if needed (pinned pages count
/// against it). What cannot be registered is written with plain requests, and a note says why:
/// the method stays correct, only a little slower. Returns whether the slots were registered,
/// and the source's addresses and owner if it was.
#[allow(clippy::type_complexity)]
pub(crate) fn register_buffers(
    ring: &IoUring,
    slots: &AlignedBuf,
    source: Option<&SourceMemory>,
    notes: &mut Vec<String>,
) -> (bool, Option<(Range<usize>, Arc<dyn HeldMemory>)>) {
    assert!(!slots.is_empty(), "a ring has at least one slot");
    let source_range = source.map(|s| s.0.address_range());
    let need = slots.len() as u64 + source_range.as_ref().map_or(0, |r| r.len() as u64);
    let lim = raise_memlock_for(need);
    let iov = |r: Range<usize>| libc::iovec {
        iov_base: r.start as *mut libc::c_void,
        iov_len: r.len(),
    };
    let slots_iov = iov(slots.as_ptr() as usize..slots.as_ptr() as usize + slots.len());
    if let (Some(s), Some(r)) = (source, source_range) {
        if r.len() > MAX_REGISTERED_BYTES {
            notes.push(format!(
                "{SOURCE_NOT_REGISTERED} ({} MiB: the kernel takes at most 1 GiB per buffer): its \
                 writes pin their pages per request",
                r.len() >> 20
            ));
        } else {
            // SAFETY: both buffers live as long as the sink (the slots are its own, the source's
            // owner is kept beside the ring), which unregisters them by dropping the ring first
            // (field order) after waiting for in-flight requests.
            match unsafe {
                ring.submitter()
                    .register_buffers(&[slots_iov, iov(r.clone())])
            } {
                Ok(()) => {
                    notes.push(format!(
                        "the latency buffer ({} MiB) is registered with io_uring: its pages are \
                         pinned once, not per write",
                        r.len() >> 20
                    ));
                    return (true, Some((r, s.0.clone())));
                }
                Err(e) => notes.push(format!(
                    "{SOURCE_NOT_REGISTERED} ({e}; {need} B to pin, RLIMIT_MEMLOCK {} B): its \
                     writes pin their pages per request",
                    lim.rlim_cur
                )),
            }
        }
    }
    // SAFETY: as above, for the slots alone.
    match unsafe { ring.submitter().register_buffers(&[slots_iov]) } {
        Ok(()) => (true, None),
        Err(e) => {
            notes.push(format!(
                "registered buffers unavailable ({e}; {} B needed, RLIMIT_MEMLOCK {} B): using plain writes",
                slots.len(),
                lim.rlim_cur
            ));
            (false, None)
        }
    }
}
