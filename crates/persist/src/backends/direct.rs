//! O_DIRECT writes from an aligned staging buffer.
//!
//! O_DIRECT needs offset, length and buffer aligned to the medium's direct-I/O alignment (statx
//! STATX_DIOALIGN: 512 B on this machine's disk, 4 KiB on many NVMe drives). Callers place writes
//! at aligned offsets; a length that is not a multiple (a 5568 B superchunk) is padded with zeros
//! in the staging buffer, never rejected. A completed O_DIRECT write is NOT durable on a disk with
//! a volatile write cache: fdatasync (or O_DSYNC) is the durability step.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::backends::{align_up, check_aligned, check_range, sync_as_asked, write_error};
use crate::error::{PersistError, Result};
use crate::medium;
use crate::sink::{Sink, SinkConfig, SinkReport, SyncMode};
use snbuf_platform::memory::AlignedBuf;

pub struct DirectSink {
    file: File,
    staging: AlignedBuf,
    alignment_bytes: u64,
    /// O_DIRECT buffer alignment (statx stx_dio_mem_align; the offset alignment when unknown).
    mem_alignment_bytes: u64,
    region_offset_bytes: u64,
    region_bytes: u64,
    sync_mode: SyncMode,
    report: SinkReport,
}

impl DirectSink {
    pub fn open(config: &SinkConfig) -> Result<Self> {
        let file = super::open_direct(config)?;
        let medium =
            medium::probe(&config.path).map_err(|e| PersistError::io("probe", &config.path, e))?;
        let alignment_bytes = medium.dio_align_bytes();
        assert!(
            alignment_bytes >= 512 && alignment_bytes.is_power_of_two(),
            "an O_DIRECT alignment of {alignment_bytes} B: whole sectors, a power of two"
        );
        check_aligned(config.region_offset_bytes, alignment_bytes)?;
        let staging_bytes = align_up(config.max_io_bytes as u64, alignment_bytes) as usize;
        let staging = AlignedBuf::new(staging_bytes, config.page_size)
            .map_err(|e| PersistError::io("allocate staging buffer for", &config.path, e))?;
        assert!(
            staging.len() >= staging_bytes && staging_bytes >= config.max_io_bytes,
            "the largest write, padded, fits the staging buffer"
        );
        let pages = staging.pages_obtained().ok();
        let mem_alignment_bytes = medium.dio_mem_align_bytes.unwrap_or(alignment_bytes).max(1);
        assert!(
            mem_alignment_bytes <= alignment_bytes,
            "the O_DIRECT alignment covers the buffer alignment"
        );
        let durability = super::file_durability(medium.volatile, config.sync_mode);
        Ok(DirectSink {
            file,
            alignment_bytes,
            mem_alignment_bytes,
            region_offset_bytes: config.region_offset_bytes,
            region_bytes: config.region_bytes,
            sync_mode: config.sync_mode,
            report: SinkReport {
                pages,
                notes: vec![format!(
                    "O_DIRECT alignment {alignment_bytes} B; shorter tails are zero-padded"
                )],
                ..SinkReport::of(
                    config,
                    medium,
                    durability,
                    alignment_bytes,
                    "pwrite O_DIRECT",
                )
            },
            staging,
        })
    }
}

impl Sink for DirectSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        check_aligned(offset, self.alignment_bytes)?;
        let padded = align_up(data.len() as u64, self.alignment_bytes) as usize;
        if padded > self.staging.len() {
            return Err(PersistError::TooLarge {
                len: data.len(),
                max_bytes: self.staging.len(),
            });
        }
        check_range(offset, padded, self.region_bytes)?;
        // Data that is already aligned in memory and length (a page-aligned ring slot, a 1 MiB
        // block) goes to the device from where it is: the write is synchronous, so the caller's
        // buffer outlives it. Anything else is staged and padded.
        let aligned_in_place = padded == data.len()
            && (data.as_ptr() as u64)
                .is_multiple_of(self.alignment_bytes.max(self.mem_alignment_bytes));
        let bytes: &[u8] = if aligned_in_place {
            data
        } else {
            let staging = self.staging.as_mut_slice();
            staging[..data.len()].copy_from_slice(data);
            staging[data.len()..padded].fill(0);
            &staging[..padded]
        };
        // O_DIRECT's contract: whole aligned blocks, inside the region.
        assert!(bytes.len() == padded && (padded as u64).is_multiple_of(self.alignment_bytes));
        assert!(offset + padded as u64 <= self.region_bytes);
        debug_assert!(
            (self.region_offset_bytes + offset).is_multiple_of(self.alignment_bytes),
            "the O_DIRECT file offset is aligned"
        );
        self.file
            .write_all_at(bytes, self.region_offset_bytes + offset)
            .map_err(|e| write_error("O_DIRECT write", &self.report.path, e, padded))
    }

    fn persist(&mut self) -> Result<()> {
        sync_as_asked(&self.file, self.sync_mode, &self.report.path)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_aligned(offset, self.alignment_bytes)?;
        let padded = align_up(buf.len() as u64, self.alignment_bytes) as usize;
        if padded > self.staging.len() {
            return Err(PersistError::TooLarge {
                len: buf.len(),
                max_bytes: self.staging.len(),
            });
        }
        check_range(offset, padded, self.region_bytes)?;
        debug_assert!(
            (self.region_offset_bytes + offset).is_multiple_of(self.alignment_bytes),
            "the O_DIRECT file offset is aligned"
        );
        let staging = &mut self.staging.as_mut_slice()[..padded];
        self.file
            .read_exact_at(staging, self.region_offset_bytes + offset)
            .map_err(|e| PersistError::io("O_DIRECT read", &self.report.path, e))?;
        debug_assert!(staging.len() >= buf.len());
        buf.copy_from_slice(&staging[..buf.len()]);
        Ok(())
    }

    fn report(&self) -> &SinkReport {
        &self.report
    }

    fn grow(&mut self, to: u64) -> Result<()> {
        self.region_bytes =
            super::grow_reported(&self.file, self.region_offset_bytes, &mut self.report, to)?;
        Ok(())
    }
}
