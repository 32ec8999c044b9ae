//! What the target file sits on: file system, DAX or not, direct-I/O alignment, volatile or not.
//!
//! Backends choose their durability step from this probe (MAP_SYNC fence, msync, fdatasync), and
//! results record it, so that a figure measured on tmpfs is never mistaken for a durable one.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The alignment assumed for O_DIRECT when the kernel cannot tell (pre-6.1 kernels): 4 KiB is a
/// multiple of every logical block size in use, so it is always correct, if sometimes wasteful.
pub const FALLBACK_DIO_ALIGN_BYTES: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Medium {
    /// File-system name from statfs's magic number (`ext4`, `xfs`, `tmpfs`, …).
    pub fs_type: String,
    /// The file is served by DAX (statx STATX_ATTR_DAX): loads and stores reach the medium.
    pub dax: bool,
    /// The file system keeps data only in RAM (tmpfs, ramfs, hugetlbfs): nothing survives power
    /// loss, whatever instructions are used. /dev/shm stands in for pmem this way.
    pub volatile: bool,
    /// O_DIRECT offset/length alignment the kernel reported (statx STATX_DIOALIGN), if any.
    pub dio_offset_align_bytes: Option<u64>,
    /// O_DIRECT buffer alignment the kernel reported, if any.
    pub dio_mem_align_bytes: Option<u64>,
}

impl Medium {
    /// The alignment O_DIRECT offsets, lengths and buffers must honour on this medium.
    pub fn dio_align_bytes(&self) -> u64 {
        let align = match (self.dio_offset_align_bytes, self.dio_mem_align_bytes) {
            (Some(o), Some(m)) if o > 0 => o.max(m).max(512),
            _ => FALLBACK_DIO_ALIGN_BYTES,
        };
        debug_assert!(
            align >= 512,
            "O_DIRECT works in whole sectors of at least 512 B"
        );
        align
    }

    /// One line for people: `ext4 (not DAX, O_DIRECT align 512 B)`.
    pub fn describe(&self) -> String {
        let kind = if self.dax {
            "DAX"
        } else if self.volatile {
            "volatile, RAM only"
        } else {
            "not DAX"
        };
        format!(
            "{} ({}, O_DIRECT align {} B)",
            self.fs_type,
            kind,
            self.dio_align_bytes()
        )
    }
}

/// Probes the medium of an existing file or directory.
pub fn probe(path: &Path) -> io::Result<Medium> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;

    let mut sfs = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: c_path is NUL-terminated and sfs is a valid out-pointer for one statfs.
    if unsafe { libc::statfs(c_path.as_ptr(), sfs.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs returned 0, so it filled the struct.
    let magic = unsafe { sfs.assume_init() }.f_type as u64;

    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: as above; statx fills at most size_of::<statx>() bytes.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            libc::STATX_BASIC_STATS | libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    let (dax, dio_offset, dio_mem) = if rc == 0 {
        // SAFETY: statx succeeded; the struct was zeroed first so unreported fields read 0.
        let stx = unsafe { stx.assume_init() };
        let dax = stx.stx_attributes_mask & libc::STATX_ATTR_DAX as u64 != 0
            && stx.stx_attributes & libc::STATX_ATTR_DAX as u64 != 0;
        if stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 {
            (
                dax,
                Some(stx.stx_dio_offset_align as u64),
                Some(stx.stx_dio_mem_align as u64),
            )
        } else {
            (dax, None, None)
        }
    } else {
        (false, None, None)
    };
    assert_eq!(
        dio_offset.is_some(),
        dio_mem.is_some(),
        "both O_DIRECT alignments are known, or neither"
    );
    assert!(
        dio_offset.is_none_or(|o| o > 0),
        "a known O_DIRECT offset alignment is of some bytes"
    );

    let (fs_type, volatile) = fs_name(magic);
    Ok(Medium {
        fs_type,
        dax,
        volatile,
        dio_offset_align_bytes: dio_offset,
        dio_mem_align_bytes: dio_mem,
    })
}

fn fs_name(magic: u64) -> (String, bool) {
    let (name, volatile) = match magic {
        0xef53 => ("ext4", false),
        0x5846_5342 => ("xfs", false),
        0x9123_683e => ("btrfs", false),
        0x0102_1994 => ("tmpfs", true),
        0x8584_58f6 => ("ramfs", true),
        0x9584_58f6 => ("hugetlbfs", true),
        0x2fc1_2fc1 => ("zfs", false),
        0x6969 => ("nfs", false),
        0x794c_7630 => ("overlayfs", false),
        0xf2f5_2010 => ("f2fs", false),
        0x4244 => ("hfs", false),
        0x5346_544e => ("ntfs", false),
        0x4d44 => ("vfat", false),
        0x6573_5546 => ("fuse", false),
        other => return (format!("unknown (0x{other:x})"), false),
    };
    (name.to_string(), volatile)
}

/// Bytes an unprivileged writer may still allocate on the file system holding `path` (None when
/// it cannot be asked).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: c is NUL-terminated; st is a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0 and filled it.
    let st = unsafe { st.assume_init() };
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Bytes of memory this process can still take before the kernel must reclaim hard or kill:
/// the system's MemAvailable, and, where the process runs in a memory cgroup with a limit (a
/// systemd unit's MemoryMax, a container), what is left below that limit, whichever is less.
/// Pages of a memory-backed file system (tmpfs) count against both.
pub fn memory_available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let system = meminfo_field(&meminfo, "MemAvailable:")?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|c| cgroup_headroom_bytes(&c, Path::new("/sys/fs/cgroup")));
    Some(cgroup.map_or(system, |c| c.min(system)))
}

fn meminfo_field(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The least headroom (limit - usage) of the process's memory cgroup and its ancestors, from
/// `/proc/self/cgroup` as `cgroup` and the cgroup file systems under `root`; None without a
/// limit. cgroup v2 (`0::/path`: memory.max, memory.current) and v1 (`N:memory:/path`:
/// memory.limit_in_bytes, memory.usage_in_bytes).
fn cgroup_headroom_bytes(cgroup: &str, root: &Path) -> Option<u64> {
    let read = |p: PathBuf| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let mut least: Option<u64> = None;
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (dir, limit_file, usage_file) = if controllers.is_empty() {
            (root.join("unified"), "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                root.join("memory"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // A pure v2 host mounts the hierarchy at the root itself.
        let dir = if dir.is_dir() {
            dir
        } else {
            root.to_path_buf()
        };
        let mut at = dir.join(path.trim_start_matches('/'));
        loop {
            debug_assert!(
                at.starts_with(&dir),
                "the walk up stops at the hierarchy's root"
            );
            if let (Some(limit), Some(usage)) =
                (read(at.join(limit_file)), read(at.join(usage_file)))
            {
                // v1 reports "no limit" as a huge number; v2 writes "max" (which does not parse).
                if limit < (1u64 << 60) {
                    let headroom = limit.saturating_sub(usage);
                    least = Some(least.map_or(headroom, |l| l.min(headroom)));
                }
            }
            if at == dir || !at.pop() {
                break;
            }
        }
    }
    least
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_headroom_comes_from_the_tightest_cgroup_limit() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("memory/a/b");
        std::fs::create_dir_all(&v1).unwrap();
        let put = |dir: &Path, f: &str, v: &str| std::fs::write(dir.join(f), v).unwrap();
        put(&v1, "memory.limit_in_bytes", "1000");
        put(&v1, "memory.usage_in_bytes", "400");
        let a = root.path().join("memory/a");
        put(&a, "memory.limit_in_bytes", "9223372036854771712");
        put(&a, "memory.usage_in_bytes", "500");
        let c = "4:memory:/a/b\n3:cpuset:/\n";
        assert_eq!(cgroup_headroom_bytes(c, root.path()), Some(600));
        let v2 = root.path().join("unified/u");
        std::fs::create_dir_all(&v2).unwrap();
        put(&v2, "memory.max", "5000");
        put(&v2, "memory.current", "1000");
        assert_eq!(cgroup_headroom_bytes("0::/u\n", root.path()), Some(4000));
        put(&v2, "memory.max", "max");
        assert_eq!(cgroup_headroom_bytes("0::/u\n", root.path()), None);
        assert!(memory_available_bytes().unwrap() > 0);
        assert_eq!(
            meminfo_field("MemTotal: 10 kB\nMemAvailable:   2 kB\n", "MemAvailable:"),
            Some(2048)
        );
    }

    #[test]
    fn probes_the_temp_dir_and_dev_shm() {
        let m = probe(&std::env::temp_dir()).unwrap();
        assert!(!m.fs_type.is_empty());
        assert!(m.dio_align_bytes().is_power_of_two());
        if Path::new("/dev/shm").exists() {
            let shm = probe(Path::new("/dev/shm")).unwrap();
            assert_eq!(shm.fs_type, "tmpfs");
            assert!(shm.volatile);
            assert!(!shm.dax);
        }
    }

    #[test]
    fn a_missing_path_is_an_error() {
        assert!(probe(Path::new("/nonexistent/snbuf/x")).is_err());
    }
}
