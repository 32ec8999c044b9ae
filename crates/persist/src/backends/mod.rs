//! One backend per family of persistence methods, all behind `Sink`.
//!
//! - `mapped`: nt, clwb, clflushopt, clflush, msync, pmdk — a shared mapping of the file; they
//!   differ only in how stores are made and drained.
//! - `direct`: O_DIRECT pwrite from an aligned staging buffer.
//! - `uring`: io_uring, O_DIRECT, queue depth > 1.
//! - `buffered`: pwrite through the page cache.

pub mod buffered;
pub mod direct;
pub mod mapped;
#[cfg(feature = "pmdk")]
pub mod pmdk;
pub mod uring;
mod uring_buffers;
mod uring_wait;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{PersistError, Result};
use crate::sink::SinkConfig;

/// Refuses a range outside the region before anything is written.
pub fn check_range(offset: u64, len: usize, region_bytes: u64) -> Result<()> {
    if offset
        .checked_add(len as u64)
        .is_none_or(|end| end > region_bytes)
    {
        return Err(PersistError::OutOfRange {
            offset,
            len,
            region_bytes,
        });
    }
    debug_assert!(
        offset + len as u64 <= region_bytes,
        "an accepted range ends inside the region"
    );
    Ok(())
}

pub(crate) fn check_aligned(offset: u64, alignment_bytes: u64) -> Result<()> {
    assert!(alignment_bytes > 0, "an alignment of some bytes");
    debug_assert!(
        alignment_bytes.is_power_of_two(),
        "an O_DIRECT alignment of {alignment_bytes} B is a power of two"
    );
    if !offset.is_multiple_of(alignment_bytes) {
        return Err(PersistError::Misaligned {
            offset,
            alignment_bytes,
        });
    }
    Ok(())
}

pub(crate) fn align_up(n: u64, alignment: u64) -> u64 {
    assert!(alignment > 0, "an alignment of some bytes");
    let up = n.div_ceil(alignment) * alignment;
    debug_assert!(up >= n && up - n < alignment);
    up
}

/// The target opened with O_DIRECT (and O_DSYNC where asked): a file system that refuses
/// O_DIRECT is `Unsupported`, for a clear message.
pub(crate) fn open_direct(config: &SinkConfig) -> Result<File> {
    debug_assert!(
        config.method.capabilities().needs_io_alignment,
        "O_DIRECT only for a method that aligns its I/O ({})",
        config.method
    );
    let mut flags = libc::O_DIRECT;
    if config.sync_mode == crate::sink::SyncMode::Dsync {
        flags |= libc::O_DSYNC;
    }
    open_target(config, flags).map_err(|e| match e {
        PersistError::Io {
            op: "open",
            ref cause,
            ..
        } if cause.raw_os_error() == Some(libc::EINVAL) => PersistError::Unsupported {
            method: config.method,
            why: format!(
                "{}: the file system does not support O_DIRECT",
                config.path.display()
            ),
        },
        other => other,
    })
}

/// What a write to a file (pwrite, O_DIRECT, io_uring) is durable as once `sync_mode` flushed
/// it: on a RAM-only file system, what it reaches is still RAM.
pub(crate) fn file_durability(
    volatile: bool,
    sync_mode: crate::sink::SyncMode,
) -> crate::sink::Durability {
    use crate::sink::{Durability, SyncMode};
    match (volatile, sync_mode) {
        (true, _) => Durability::Volatile,
        (false, SyncMode::Fdatasync) => Durability::Fdatasync,
        (false, SyncMode::Dsync) => Durability::Dsync,
    }
}

/// Opens (creating if needed) the target and makes sure its region exists: with `prefault`, the
/// blocks are allocated now (posix_fallocate) so that no write in the timed region waits for the
/// file system's allocator, and a target that cannot hold the region fails here with ENOSPC.
pub(crate) fn open_target(config: &SinkConfig, extra_flags: i32) -> Result<File> {
    let path: &Path = &config.path;
    assert!(
        config.region_bytes > 0 && config.max_io_bytes > 0,
        "open_with refuses an empty region or largest I/O"
    );
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(extra_flags)
        .open(path)
        .map_err(|e| PersistError::io("open", path, e))?;
    let end = config
        .region_offset_bytes
        .checked_add(config.region_bytes)
        .ok_or_else(|| PersistError::Config("region end overflows".into()))?;
    if config.prefault {
        // SAFETY: a plain syscall on an fd we own.
        let rc = unsafe {
            libc::posix_fallocate(
                file.as_raw_fd(),
                config.region_offset_bytes as libc::off_t,
                config.region_bytes as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(PersistError::io(
                "allocate",
                path,
                std::io::Error::from_raw_os_error(rc),
            ));
        }
    } else {
        let len = file
            .metadata()
            .map_err(|e| PersistError::io("stat", path, e))?
            .len();
        if len < end {
            file.set_len(end)
                .map_err(|e| PersistError::io("extend", path, e))?;
        }
    }
    Ok(file)
}

/// Grows a file-backed region from `from` to `to` bytes (nothing when `to <= from`): the new
/// blocks are allocated now (posix_fallocate), so a write into them finds its space, and a file
/// system without it fails here with `NoSpace` before anything is written.
pub(crate) fn grow_region(
    file: &File,
    path: &Path,
    region_offset_bytes: u64,
    from: u64,
    to: u64,
) -> Result<()> {
    if to <= from {
        return Ok(());
    }
    let at = region_offset_bytes
        .checked_add(from)
        .filter(|at| at.checked_add(to - from).is_some())
        .ok_or_else(|| PersistError::Config("region end overflows".into()))?;
    assert_eq!(
        at + (to - from),
        region_offset_bytes + to,
        "the new blocks end where the grown region does"
    );
    // SAFETY: a plain syscall on an fd the caller owns.
    let rc = unsafe {
        libc::posix_fallocate(
            file.as_raw_fd(),
            at as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    if rc != 0 {
        return Err(PersistError::io(
            "grow",
            path,
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

/// `grow_region` for a sink whose report holds its region's size, which then says the new one
/// (returned: what the sink may now write).
pub(crate) fn grow_reported(
    file: &File,
    region_offset_bytes: u64,
    report: &mut crate::sink::SinkReport,
    to: u64,
) -> Result<u64> {
    let from = report.region_bytes;
    grow_region(file, &report.path, region_offset_bytes, from, to)?;
    report.region_bytes = from.max(to);
    assert!(
        report.region_bytes >= to && report.region_bytes >= from,
        "a region only grows"
    );
    Ok(report.region_bytes)
}

/// A file written with `pwrite` made durable as `mode` says: `fdatasync` now, or nothing to do
/// with `O_DSYNC`, where each write returned only once durable.
pub(crate) fn sync_as_asked(file: &File, mode: crate::sink::SyncMode, path: &Path) -> Result<()> {
    match mode {
        crate::sink::SyncMode::Fdatasync => file
            .sync_data()
            .map_err(|e| PersistError::io("fdatasync", path, e)),
        crate::sink::SyncMode::Dsync => Ok(()),
    }
}

/// Maps `WriteZero` (the kernel accepted no bytes) to the typed short-write error.
pub(crate) fn write_error(
    op: &'static str,
    path: &Path,
    e: std::io::Error,
    expected: usize,
) -> PersistError {
    debug_assert!(expected > 0, "only a write of some bytes can fail");
    let e = if e.kind() == std::io::ErrorKind::WriteZero {
        PersistError::ShortWrite {
            op,
            path: path.to_path_buf(),
            written: 0,
            expected,
        }
    } else {
        PersistError::io(op, path, e)
    };
    debug_assert!(e.poisons_sink(), "a failed write leaves the target unknown");
    e
}
