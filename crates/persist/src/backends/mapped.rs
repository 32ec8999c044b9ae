//! The mapped-memory methods: nt, clwb, clflushopt, clflush, msync and pmdk.
//!
//! All map the target region shared and store into it; they differ in how the stores reach the
//! persistence domain:
//! - nt: non-temporal vector stores, then SFENCE at the persist point;
//! - clwb / clflushopt: regular stores, that flush per written line, then SFENCE (both are weakly
//!   ordered: without the fence, a later "ack" store could become visible before them);
//! - clflush: regular stores and CLFLUSH per line. CLFLUSH is ordered with respect to stores and
//!   other CLFLUSHes and completes its write-back in program order, so no fence is needed;
//! - msync: memcpy, then msync of the dirty pages (the kernel writes them back);
//! - pmdk: libpmem's pmem_memcpy_nodrain, then pmem_drain.
//!
//! On DAX with MAP_SYNC that is all durability takes. On a mapping that is not persistent memory
//! the instructions only reach the page cache, so a disk-backed file also gets msync of the
//! written range. On tmpfs (RAM only) there is nothing to sync to: the result says `volatile`.

use std::fs::File;

use crate::backends::{check_range, open_target};
use crate::error::{PersistError, Result};
use crate::medium;
use crate::sink::{Durability, Sink, SinkConfig, SinkReport};
use crate::Method;
use snbuf_platform::cpu::{CpuFeatures, FlushInstr, SimdPath};
use snbuf_platform::memory::{FileMapping, MapKind};

#[derive(Clone, Copy, Debug)]
enum Store {
    Nt {
        path: SimdPath,
        edge: FlushInstr,
        #[cfg(target_arch = "x86_64")]
        copy: snbuf_platform::instructions::CopyNtFn,
        /// The copy that also checksums, where the CPU has it (`write_in_place_checksummed`).
        copy_crc: Option<crate::nt_crc::CopyNtCrcFn>,
    },
    Flush(FlushInstr),
    Plain,
    #[cfg(feature = "pmdk")]
    Pmdk,
}

pub struct MappedSink {
    map: FileMapping,
    // Kept open for the mapping's lifetime so the file cannot be reported closed under it.
    _file: File,
    store: Store,
    msync_at_persist: bool,
    /// Byte range written since the last persist (for msync).
    dirty: Option<(usize, usize)>,
    region_offset_bytes: u64,
    region_bytes: u64,
    page_size: snbuf_platform::memory::PageSize,
    report: SinkReport,
}

impl MappedSink {
    /// Each check on the way to a mapping (CPU instructions, DAX, file size, mapping flags)
    /// refuses with its own reason before anything is mapped.
    pub fn open(config: &SinkConfig) -> Result<Self> {
        let store = store_for(config)?;
        let file = open_target(config, 0)?;
        let medium =
            medium::probe(&config.path).map_err(|e| PersistError::io("probe", &config.path, e))?;
        let len = usize::try_from(config.region_bytes)
            .map_err(|_| PersistError::Config("region does not fit in the address space".into()))?;
        assert!(
            config
                .region_offset_bytes
                .is_multiple_of(config.page_size.bytes() as u64),
            "open_with refuses a region offset that is not a multiple of the page size"
        );
        let map = FileMapping::map(
            &file,
            config.region_offset_bytes,
            len,
            config.page_size,
            config.prefault && config.populate,
        )
        .map_err(|e| PersistError::io("mmap", &config.path, e))?;
        assert_eq!(map.len(), len, "the mapping is the region");
        let mut notes = Vec::new();
        let (durability, msync_at_persist) =
            durability_of(map.kind(), config.method, &medium, &mut notes);
        let instruction_path = instruction_path(store, &mut notes);
        let pages = map.pages_obtained().ok();
        Ok(MappedSink {
            map,
            _file: file,
            store,
            msync_at_persist,
            dirty: None,
            region_offset_bytes: config.region_offset_bytes,
            region_bytes: config.region_bytes,
            page_size: config.page_size,
            report: SinkReport {
                pages,
                notes,
                ..SinkReport::of(config, medium, durability, 1, instruction_path)
            },
        })
    }
}

/// How `config.method` stores to the mapping, refused where this CPU lacks its instructions.
fn store_for(config: &SinkConfig) -> Result<Store> {
    let cpu = CpuFeatures::detect();
    let unsupported = |why: &str| PersistError::Unsupported {
        method: config.method,
        why: why.to_string(),
    };
    let need = |instr: FlushInstr| {
        if cpu.has(instr) {
            Ok(instr)
        } else {
            Err(unsupported(&format!("this CPU has no {}", instr.name())))
        }
    };
    let store = match config.method {
        Method::Nt => {
            let path = cpu
                .simd_path()
                .ok_or_else(|| unsupported("non-temporal stores need x86-64"))?;
            Store::Nt {
                path,
                edge: cpu
                    .best_flush()
                    .ok_or_else(|| unsupported("no cache-line flush instruction"))?,
                #[cfg(target_arch = "x86_64")]
                copy: snbuf_platform::instructions::copy_nt_fn(path),
                copy_crc: crate::nt_crc::copy_nt_crc_fn(),
            }
        }
        Method::Clwb => Store::Flush(need(FlushInstr::Clwb)?),
        Method::Clflushopt => Store::Flush(need(FlushInstr::Clflushopt)?),
        Method::Clflush => Store::Flush(need(FlushInstr::Clflush)?),
        Method::Msync => Store::Plain,
        #[cfg(feature = "pmdk")]
        Method::Pmdk => Store::Pmdk,
        other => return Err(unsupported(&format!("{other} is not a mapped method"))),
    };
    debug_assert!(
        !matches!(store, Store::Flush(f) if !cpu.has(f)),
        "a flush instruction this CPU has"
    );
    Ok(store)
}

/// What a persist achieves on this mapping (and whether it must msync), with the notes that
/// say why.
fn durability_of(
    kind: MapKind,
    method: Method,
    medium: &medium::Medium,
    notes: &mut Vec<String>,
) -> (Durability, bool) {
    let (durability, msync) = match (kind, method, medium.volatile) {
        (_, Method::Msync, true) => (Durability::Volatile, true),
        (_, Method::Msync, false) => (Durability::Msync, true),
        // A RAM-only medium is that first, whatever mapping it gave.
        (MapKind::Sync, _, true) => (Durability::Volatile, false),
        (MapKind::Sync, _, _) => (Durability::MapSync, false),
        (MapKind::Shared, _, true) => {
            notes.push(format!(
                "{} is not persistent memory and keeps data in RAM only: this measures the \
                 instruction path, nothing here survives power loss",
                medium.fs_type
            ));
            (Durability::Volatile, false)
        }
        (MapKind::Shared, _, false) => {
            notes.push(format!(
                "{} refused MAP_SYNC (not DAX): not persistent memory; msync of the written \
                 range makes data durable",
                medium.fs_type
            ));
            (Durability::Msync, true)
        }
    };
    assert!(
        durability != Durability::Msync || msync,
        "a durability by msync is one the persist msyncs for"
    );
    (durability, msync)
}

/// The instructions the store uses, with a note on the nt path's choices.
fn instruction_path(store: Store, notes: &mut Vec<String>) -> String {
    match store {
        Store::Nt {
            path,
            edge,
            copy_crc,
            ..
        } => {
            notes.push(format!(
                "non-temporal stores use {path} (widest the CPU has); partial lines use {}; \
                 the recorder's chunk CRC is {}",
                edge.name(),
                match copy_crc {
                    Some(_) => "folded in as the copy loads (VPCLMULQDQ)",
                    None => "taken after the copy (no VPCLMULQDQ)",
                }
            ));
            path.name().to_string()
        }
        Store::Flush(f) => f.name().to_string(),
        Store::Plain => "memcpy".to_string(),
        #[cfg(feature = "pmdk")]
        Store::Pmdk => "libpmem".to_string(),
    }
}

impl MappedSink {
    /// Widens the range msync must cover at the next persist (where it is needed).
    fn note_written(&mut self, off: usize, len: usize) {
        debug_assert!(
            off + len <= self.map.len(),
            "a written range lies in the mapping"
        );
        if self.msync_at_persist {
            let end = off + len;
            self.dirty = Some(match self.dirty {
                Some((lo, hi)) => (lo.min(off), hi.max(end)),
                None => (off, end),
            });
            debug_assert!(
                self.dirty.is_some_and(|(lo, hi)| lo <= off && end <= hi),
                "the next persist's msync covers what was written"
            );
        }
    }
}

impl Sink for MappedSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        debug_assert_eq!(
            self.map.len() as u64,
            self.region_bytes,
            "the mapping is the region checked"
        );
        check_range(offset, data.len(), self.region_bytes)?;
        let off = offset as usize;
        // SAFETY: [off, off + len) is inside the mapping (checked above); `data` is a separate
        // allocation, so the ranges cannot overlap; the CPU features were checked at open.
        unsafe {
            let dst = self.map.as_ptr().add(off);
            match self.store {
                #[cfg(target_arch = "x86_64")]
                Store::Nt { copy, edge, .. } => copy(dst, data.as_ptr(), data.len(), edge),
                #[cfg(target_arch = "x86_64")]
                Store::Flush(f) => {
                    snbuf_platform::instructions::copy_flushed(f, dst, data.as_ptr(), data.len())
                }
                #[cfg(not(target_arch = "x86_64"))]
                Store::Nt { .. } | Store::Flush(_) => unreachable!("refused at open off x86-64"),
                Store::Plain => std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()),
                #[cfg(feature = "pmdk")]
                Store::Pmdk => {
                    crate::backends::pmdk::memcpy_nodrain(dst, data.as_ptr(), data.len())
                }
            }
        }
        self.note_written(off, data.len());
        Ok(())
    }

    fn write_in_place_checksummed(&mut self, offset: u64, parts: &[&[u8]]) -> Result<u32> {
        #[cfg(target_arch = "x86_64")]
        if let Store::Nt {
            copy_crc: Some(copy_crc),
            edge,
            ..
        } = self.store
        {
            let len: usize = parts.iter().map(|p| p.len()).sum();
            check_range(offset, len, self.region_bytes)?;
            let mut off = offset as usize;
            let mut crc = 0;
            for part in parts {
                // SAFETY: [offset, offset + len) is inside the mapping (checked above) and the
                // parts, back to back, fill it; `parts` are other memory than the mapping's
                // region being written; the CPU has the routine's features (chosen at open).
                crc = unsafe {
                    copy_crc(
                        self.map.as_ptr().add(off),
                        part.as_ptr(),
                        part.len(),
                        edge,
                        crc,
                    )
                };
                off += part.len();
            }
            assert_eq!(
                off,
                offset as usize + len,
                "the parts fill the range back to back"
            );
            self.note_written(offset as usize, len);
            return Ok(crc);
        }
        self.write_in_place(offset, parts)?;
        Ok(snbuf_platform::crc::crc32c_in_cache(parts))
    }

    fn persist(&mut self) -> Result<()> {
        match self.store {
            #[cfg(target_arch = "x86_64")]
            Store::Nt { .. } | Store::Flush(FlushInstr::Clwb | FlushInstr::Clflushopt) => {
                snbuf_platform::instructions::sfence()
            }
            // CLFLUSH is strongly ordered: its write-backs are complete in program order.
            Store::Flush(FlushInstr::Clflush) | Store::Plain => {}
            #[cfg(not(target_arch = "x86_64"))]
            Store::Nt { .. } | Store::Flush(_) => {}
            #[cfg(feature = "pmdk")]
            Store::Pmdk => crate::backends::pmdk::drain(),
        }
        if let Some((lo, hi)) = self.dirty.take() {
            assert!(
                lo <= hi && hi as u64 <= self.region_bytes,
                "dirty range [{lo}, {hi}) in the region"
            );
            self.map
                .msync(lo, hi - lo)
                .map_err(|e| PersistError::io("msync", &self.report.path, e))?;
        }
        Ok(())
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        debug_assert_eq!(
            self.map.len() as u64,
            self.region_bytes,
            "the mapping is the region checked"
        );
        check_range(offset, buf.len(), self.region_bytes)?;
        // SAFETY: the range is inside the mapping (checked) and `buf` is a separate allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(offset as usize),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }

    fn report(&self) -> &SinkReport {
        &self.report
    }

    /// The file grown, then mapped anew over the longer region (the old mapping unmapped). What
    /// was written before is persisted first: the stores made through the old mapping reach
    /// their persistence point before it goes.
    fn grow(&mut self, region_bytes: u64) -> Result<()> {
        if region_bytes <= self.region_bytes {
            return Ok(());
        }
        self.persist()?;
        assert!(
            self.dirty.is_none(),
            "what the old mapping holds is persisted before it goes"
        );
        crate::backends::grow_region(
            &self._file,
            &self.report.path,
            self.region_offset_bytes,
            self.region_bytes,
            region_bytes,
        )?;
        let len = usize::try_from(region_bytes)
            .map_err(|_| PersistError::Config("region does not fit in the address space".into()))?;
        let map = FileMapping::map(
            &self._file,
            self.region_offset_bytes,
            len,
            self.page_size,
            false,
        )
        .map_err(|e| PersistError::io("mmap", &self.report.path, e))?;
        if map.kind() != self.map.kind() {
            // A durability that changed under the burst (MAP_SYNC now refused) is not taken.
            return Err(PersistError::Unsupported {
                method: self.report.method,
                why: "the longer mapping would not be of the same kind".into(),
            });
        }
        self.map = map;
        self.region_bytes = region_bytes;
        self.report.region_bytes = region_bytes;
        assert_eq!(
            self.map.len() as u64,
            self.region_bytes,
            "the new mapping is the grown region"
        );
        Ok(())
    }
}
