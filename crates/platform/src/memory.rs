//! Memory the engine owns: DRAM buffers and file mappings, with the page size asked for and the
//! page size actually obtained.
//!
//! Mason et al. show that on persistent memory the page size dominates the result, so every
//! mapping records what the kernel granted (from /proc/self/smaps), not what was requested: a
//! "2 MiB" run that silently got 4 KiB pages would be a false figure.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

pub const SMALL_PAGE_BYTES: usize = 4096;
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The page size a mapping asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSize {
    Small4K,
    Huge2M,
}

impl PageSize {
    pub fn bytes(self) -> usize {
        match self {
            PageSize::Small4K => SMALL_PAGE_BYTES,
            PageSize::Huge2M => HUGE_PAGE_BYTES,
        }
    }

    pub fn from_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            4096 => Some(PageSize::Small4K),
            2097152 => Some(PageSize::Huge2M),
            _ => None,
        }
    }
}

/// What the kernel granted for a mapping, read from /proc/self/smaps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PagesObtained {
    /// Resident bytes of the mapping.
    pub resident_bytes: u64,
    /// Of those, bytes mapped by 2 MiB (PMD) pages: AnonHugePages, ShmemPmdMapped, FilePmdMapped.
    pub huge_bytes: u64,
    /// KernelPageSize (hugetlbfs mappings report 2 MiB here).
    pub kernel_page_bytes: u64,
}

impl PagesObtained {
    /// The page size that serves most of the mapping.
    pub fn effective_page_bytes(&self) -> u64 {
        if self.kernel_page_bytes >= HUGE_PAGE_BYTES as u64 {
            return self.kernel_page_bytes;
        }
        if self.resident_bytes > 0 && self.huge_bytes * 2 > self.resident_bytes {
            HUGE_PAGE_BYTES as u64
        } else {
            SMALL_PAGE_BYTES as u64
        }
    }

    /// Fraction of resident bytes on 2 MiB pages.
    pub fn huge_fraction(&self) -> f64 {
        if self.kernel_page_bytes >= HUGE_PAGE_BYTES as u64 {
            return 1.0;
        }
        if self.resident_bytes == 0 {
            0.0
        } else {
            self.huge_bytes as f64 / self.resident_bytes as f64
        }
    }
}

/// Reads /proc/self/smaps for the mapping that contains `addr`.
///
/// The file is streamed and reading stops at the mapping: the kernel builds smaps as it is read,
/// walking the page tables of every mapping it reports, so reading all of it costs time in
/// proportion to everything the process has mapped (seconds, next to gigabytes of latency
/// buffers), where stopping early costs only the mappings before this one.
pub fn pages_obtained(addr: *const u8) -> io::Result<PagesObtained> {
    use std::io::BufRead;
    let file = std::io::BufReader::new(File::open("/proc/self/smaps")?);
    let target = addr as usize;
    let mut inside = false;
    let mut found = false;
    let mut out = PagesObtained::default();
    for line in file.lines() {
        let line = line?;
        // A VMA header looks like "7f12a0000000-7f12a0200000 rw-s 00000000 00:1a 1234  /path".
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    if inside {
                        break;
                    }
                    inside = a <= target && target < b;
                    found |= inside;
                    continue;
                }
            }
        }
        if !inside {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Ok(kib) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "Rss:" => out.resident_bytes = kib * 1024,
            "AnonHugePages:" | "ShmemPmdMapped:" | "FilePmdMapped:" => out.huge_bytes += kib * 1024,
            "KernelPageSize:" => out.kernel_page_bytes = kib * 1024,
            _ => {}
        }
    }
    if !found {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "address is not in any mapping",
        ));
    }
    Ok(out)
}

/// A unit runs for months, and each burst allocates and frees buffers of a chunk or more (the
/// verify pass reads whole chunks). glibc serves such sizes with mmap until the first is freed,
/// then raises its threshold and serves them from per-thread heaps, where they fragment: resident
/// memory crept up ~70 KiB per burst in the soak run. A fixed threshold keeps them mapped and
/// returned to the system when freed, so memory stays flat (RELIABILITY.md, soak).
pub fn keep_large_allocations_off_the_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter, under glibc's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// A raw mmap'd region, unmapped on drop.
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value; access is through &/&mut self.
unsafe impl Send for Region {}
// SAFETY: as for Send: shared access is through &self, which only reads the pointer.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping this value created and nobody else unmaps.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Reserves `len` bytes of address space aligned to `align`, so a later MAP_FIXED mapping can be
/// served by 2 MiB page-table entries (the kernel only uses PMD mappings at aligned addresses).
fn reserve_aligned(len: usize, align: usize) -> io::Result<*mut u8> {
    let span = len + align;
    // SAFETY: an anonymous PROT_NONE reservation with no fixed address has no preconditions.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let base = base as usize;
    let aligned = (base + align - 1) & !(align - 1);
    // SAFETY: both trims are inside the reservation just made; the caller maps over [aligned, +len).
    unsafe {
        if aligned > base {
            libc::munmap(base as *mut _, aligned - base);
        }
        let end = aligned + len;
        if base + span > end {
            libc::munmap(end as *mut _, base + span - end);
        }
    }
    Ok(aligned as *mut u8)
}

/// Writes every page of a mapping once so the timed region takes no page faults. MADV_POPULATE_WRITE
/// (Linux 5.14) does it without changing the contents; older kernels get a read-then-write of one
/// byte per page, which is just as content-preserving.
fn prefault_write(ptr: *mut u8, len: usize) {
    // SAFETY: the range is a writable mapping owned by the caller.
    let rc = unsafe { libc::madvise(ptr.cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        let mut off = 0;
        while off < len {
            // SAFETY: off < len, inside the caller's writable mapping.
            unsafe {
                let p = ptr.add(off);
                p.write_volatile(p.read_volatile());
            }
            off += SMALL_PAGE_BYTES;
        }
    }
}

/// A DRAM buffer aligned to its page size, prefaulted, optionally on 2 MiB pages.
pub struct AlignedBuf {
    region: Region,
    requested: PageSize,
}

/// A private anonymous read-write mapping of `len` bytes, with `flags` added: at no fixed address
/// (`at` null), or with `MAP_FIXED` over a reservation of exactly `len` bytes at `at`.
fn map_anonymous(at: *mut libc::c_void, len: usize, flags: i32) -> io::Result<*mut u8> {
    assert!(
        at.is_null() != (flags & libc::MAP_FIXED != 0),
        "an address exactly when the mapping is fixed there"
    );
    // SAFETY: anonymous memory; at a fixed address only over a reservation the caller made for
    // exactly len bytes.
    let p = unsafe {
        libc::mmap(
            at,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

impl AlignedBuf {
    /// Allocates and prefaults `len` bytes (rounded up to the page size), zero-filled.
    pub fn new(len: usize, page_size: PageSize) -> io::Result<Self> {
        Self::new_on_node(len, page_size, None)
    }

    /// `new`, with the pages taken from NUMA node `node` where it has them
    /// (`numa::prefer_node`, before the prefault touches them). None: the kernel's default.
    pub fn new_on_node(len: usize, page_size: PageSize, node: Option<u32>) -> io::Result<Self> {
        let page = page_size.bytes();
        let len = len.max(1).div_ceil(page) * page;
        let ptr = match page_size {
            PageSize::Small4K => map_anonymous(std::ptr::null_mut(), len, 0)?,
            // First choice: the hugetlbfs pool (guaranteed 2 MiB pages, if the admin reserved
            // some). Otherwise transparent huge pages on an aligned region via MADV_HUGEPAGE.
            PageSize::Huge2M => match map_anonymous(std::ptr::null_mut(), len, libc::MAP_HUGETLB) {
                Ok(p) => p,
                Err(_) => {
                    let at = reserve_aligned(len, HUGE_PAGE_BYTES)?;
                    let p = map_anonymous(at.cast(), len, libc::MAP_FIXED)?;
                    // SAFETY: advice on our own mapping; failure only means no THP.
                    unsafe { libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE) };
                    p
                }
            },
        };
        assert_eq!(
            ptr as usize % page,
            0,
            "a mapping starts on a page of the size asked"
        );
        if let Some(node) = node {
            if let Err(e) = crate::numa::prefer_node(ptr, len, node) {
                // SAFETY: the mapping made above, not used by anyone yet.
                unsafe { libc::munmap(ptr.cast(), len) };
                return Err(e);
            }
        }
        prefault_write(ptr, len);
        Ok(AlignedBuf {
            region: Region {
                ptr: NonNull::new(ptr).expect("mmap never returns null on success"),
                len,
            },
            requested: page_size,
        })
    }

    pub fn len(&self) -> usize {
        self.region.len
    }

    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.region.ptr.as_ptr()
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.region.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is len initialised (zero-filled, then written by us) bytes.
        unsafe { std::slice::from_raw_parts(self.region.ptr.as_ptr(), self.region.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.region.ptr.as_ptr(), self.region.len) }
    }

    pub fn requested_page_size(&self) -> PageSize {
        self.requested
    }

    pub fn pages_obtained(&self) -> io::Result<PagesObtained> {
        pages_obtained(self.as_ptr())
    }
}

/// How a file mapping was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// MAP_SHARED_VALIDATE | MAP_SYNC: the file is on DAX and its metadata is synchronous, so a
    /// fence after the stores (or flushes) is all durability takes.
    Sync,
    /// MAP_SHARED: the kernel refused MAP_SYNC (not DAX); msync/fdatasync is needed for durability.
    Shared,
}

/// A shared, writable mapping of `[offset, offset + len)` of a file.
pub struct FileMapping {
    region: Region,
    kind: MapKind,
}

impl FileMapping {
    /// Maps the range, trying MAP_SYNC first; `offset` must be a multiple of the page size asked
    /// for. With `PageSize::Huge2M` the address is 2 MiB-aligned and MADV_HUGEPAGE is given.
    pub fn map(
        file: &File,
        offset: u64,
        len: usize,
        page_size: PageSize,
        prefault: bool,
    ) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot map 0 bytes",
            ));
        }
        // Always 2 MiB-aligned: it costs nothing and lets a huge-page file (DAX, tmpfs huge=) use
        // PMD mappings even when 4 KiB was asked for.
        let at = reserve_aligned(len, HUGE_PAGE_BYTES)?;
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: MAP_FIXED over our own reservation of exactly len bytes.
        let mut p = unsafe {
            libc::mmap(
                at.cast(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | libc::MAP_FIXED,
                fd,
                offset as libc::off_t,
            )
        };
        let mut kind = MapKind::Sync;
        if p == libc::MAP_FAILED {
            // EOPNOTSUPP (or EINVAL on old kernels): not DAX. The reservation is still in place.
            kind = MapKind::Shared;
            // SAFETY: as above.
            p = unsafe {
                libc::mmap(
                    at.cast(),
                    len,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                let err = io::Error::last_os_error();
                // SAFETY: release the reservation we own.
                unsafe { libc::munmap(at.cast(), len) };
                return Err(err);
            }
        }
        if page_size == PageSize::Huge2M {
            // SAFETY: advice on our own mapping; failure only means no huge pages.
            unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
        }
        let ptr = p as *mut u8;
        if prefault {
            prefault_write(ptr, len);
        }
        Ok(FileMapping {
            region: Region {
                ptr: NonNull::new(ptr).expect("mmap never returns null on success"),
                len,
            },
            kind,
        })
    }

    pub fn kind(&self) -> MapKind {
        self.kind
    }

    pub fn len(&self) -> usize {
        self.region.len
    }

    pub fn is_empty(&self) -> bool {
        self.region.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.region.ptr.as_ptr()
    }

    /// msync(MS_SYNC) of the pages overlapping `[offset, offset + len)` of the mapping.
    pub fn msync(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = offset & !(SMALL_PAGE_BYTES - 1);
        let end = (offset + len).min(self.region.len);
        // SAFETY: [start, end) lies inside our mapping; msync only writes back.
        let rc = unsafe {
            libc::msync(
                self.region.ptr.as_ptr().add(start).cast(),
                end - start,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn pages_obtained(&self) -> io::Result<PagesObtained> {
        pages_obtained(self.as_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_aligned_zeroed_and_resident() {
        let b = AlignedBuf::new(10_000, PageSize::Small4K).unwrap();
        assert_eq!(b.as_ptr() as usize % SMALL_PAGE_BYTES, 0);
        assert_eq!(b.len(), 12_288);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        let pages = b.pages_obtained().unwrap();
        assert!(pages.resident_bytes >= 12_288, "{pages:?}");
    }

    #[test]
    fn huge_buffers_record_what_they_got() {
        let b = AlignedBuf::new(4 * HUGE_PAGE_BYTES, PageSize::Huge2M).unwrap();
        assert_eq!(b.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
        let pages = b.pages_obtained().unwrap();
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if thp.contains("[never]") {
            eprintln!("skip: transparent huge pages are disabled, cannot check 2 MiB pages");
            return;
        }
        assert_eq!(
            pages.effective_page_bytes(),
            HUGE_PAGE_BYTES as u64,
            "{pages:?}"
        );
    }

    #[test]
    fn a_tmpfs_file_maps_shared_not_sync() {
        let dir = tempfile::tempdir_in(shm_or_tmp()).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("m"))
            .unwrap();
        f.set_len(1 << 20).unwrap();
        let m = FileMapping::map(&f, 0, 1 << 20, PageSize::Small4K, true).unwrap();
        assert_eq!(m.kind(), MapKind::Shared, "no DAX on this machine's tmp");
        m.msync(100, 5000).unwrap();
    }

    fn shm_or_tmp() -> std::path::PathBuf {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    }
}
