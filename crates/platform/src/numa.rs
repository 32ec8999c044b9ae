//! Which NUMA node a storage device hangs off, and which CPUs each node has, from sysfs: so that
//! a link's latency buffer lives and its writer runs on the node of the device it writes (the
//! papers' per-socket layout). On a machine with one node there is nothing to place, and the
//! recorder says so.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const NODES: &str = "/sys/devices/system/node";

/// The NUMA node of the block device holding `path`: walks up from the device's sysfs entry
/// (`/sys/dev/block/MAJ:MIN`, a partition's disk, an NVMe namespace's controller, a pmem
/// namespace's region) to the first `numa_node` the kernel gives. None when the file system has
/// no block device (tmpfs), the device has no node (a virtual one, `-1`), or sysfs says nothing.
pub fn node_of_path(path: &Path) -> Option<u32> {
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let entry = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    node_above(&entry)
}

/// The first `numa_node` in `dir` or a directory above it, as far as `/sys/devices`.
fn node_above(dir: &Path) -> Option<u32> {
    let mut at: Option<&Path> = Some(dir);
    while let Some(d) = at {
        if !d.starts_with("/sys/devices") {
            return None;
        }
        if let Ok(text) = std::fs::read_to_string(d.join("numa_node")) {
            // -1: the device is not attached to a node.
            return text
                .trim()
                .parse::<i64>()
                .ok()
                .and_then(|n| u32::try_from(n).ok());
        }
        at = d.parent();
    }
    None
}

/// The machine's NUMA nodes and their CPUs, from sysfs; empty when sysfs says nothing.
pub fn nodes() -> Vec<(u32, Vec<usize>)> {
    let Ok(entries) = std::fs::read_dir(NODES) else {
        return Vec::new();
    };
    let mut nodes: Vec<(u32, Vec<usize>)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix("node")?.parse::<u32>().ok()?;
            let list =
                std::fs::read_to_string(PathBuf::from(NODES).join(&name).join("cpulist")).ok()?;
            let cpus = crate::cpu::parse_cpu_list(list.trim()).unwrap_or_default();
            Some((n, cpus))
        })
        .collect();
    nodes.sort();
    nodes
}

/// The CPUs a thread writing to a device on `node` should run on: those of `allowed` on that
/// node. Empty (no preference) when the machine has one node or fewer, the device's node is not
/// known, or none of `allowed` is on it.
pub fn cpus_near(node: Option<u32>, nodes: &[(u32, Vec<usize>)], allowed: &[usize]) -> Vec<usize> {
    if nodes.len() < 2 {
        return Vec::new();
    }
    let Some(node) = node else {
        return Vec::new();
    };
    nodes
        .iter()
        .find(|(n, _)| *n == node)
        .map(|(_, cpus)| {
            cpus.iter()
                .copied()
                .filter(|c| allowed.contains(c))
                .collect()
        })
        .unwrap_or_default()
}

/// The node a link's memory should be placed on: its device's node, on a machine with more than
/// one node; None (the kernel's default, first touch) otherwise.
pub fn memory_node(device_node: Option<u32>, nodes: &[(u32, Vec<usize>)]) -> Option<u32> {
    if nodes.len() < 2 {
        return None;
    }
    device_node.filter(|n| nodes.iter().any(|(m, _)| m == n))
}

/// Asks the kernel to take the pages of `[addr, addr + len)` from `node` (MPOL_PREFERRED: from
/// another node only when that one is full, so a buffer is never refused for it). Must come
/// before the pages are first touched; pages already there stay where they are.
pub(crate) fn prefer_node(addr: *mut u8, len: usize, node: u32) -> std::io::Result<()> {
    const MPOL_PREFERRED: libc::c_long = 1;
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut mask = vec![0 as libc::c_ulong; node as usize / bits + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // SAFETY: mbind only changes the memory policy of the caller's own mapping; the mask holds
    // `maxnode` bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            MPOL_PREFERRED,
            mask.as_ptr(),
            (mask.len() * bits + 1) as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_go_near_their_device_only_where_there_is_a_choice() {
        let two = vec![(0, vec![0, 1, 2, 3]), (1, vec![4, 5, 6, 7])];
        let allowed: Vec<usize> = (0..8).collect();
        assert_eq!(cpus_near(Some(1), &two, &allowed), vec![4, 5, 6, 7]);
        assert_eq!(
            cpus_near(Some(1), &two, &[0, 1, 5]),
            vec![5],
            "only CPUs allowed"
        );
        assert!(
            cpus_near(Some(1), &two, &[0, 1]).is_empty(),
            "none allowed there"
        );
        assert!(cpus_near(None, &two, &allowed).is_empty(), "node not known");
        assert!(
            cpus_near(Some(0), &[(0, vec![0, 1])], &allowed).is_empty(),
            "one node"
        );
    }

    #[test]
    fn memory_is_placed_only_where_there_is_a_choice() {
        let two = vec![(0, vec![0, 1]), (1, vec![2, 3])];
        assert_eq!(memory_node(Some(1), &two), Some(1));
        assert_eq!(memory_node(Some(7), &two), None, "no such node");
        assert_eq!(memory_node(None, &two), None);
        assert_eq!(memory_node(Some(0), &[(0, vec![0, 1])]), None, "one node");
    }

    #[test]
    fn a_buffer_asked_for_on_a_node_has_that_policy() {
        // Node 0 exists on every Linux machine. The kernel shows a mapping's policy in
        // numa_maps (absent on kernels built without NUMA: then there is nothing to check).
        let buf = crate::AlignedBuf::new_on_node(1 << 20, crate::PageSize::Small4K, Some(0))
            .expect("mbind to node 0");
        assert!(buf.as_slice().iter().all(|&b| b == 0));
        let Ok(maps) = std::fs::read_to_string("/proc/self/numa_maps") else {
            eprintln!("no /proc/self/numa_maps: policy not checked");
            return;
        };
        let addr = format!("{:x} ", buf.as_ptr() as usize);
        let line = maps
            .lines()
            .find(|l| l.starts_with(&addr))
            .unwrap_or_else(|| panic!("{addr}not in numa_maps:\n{maps}"));
        assert!(line.contains("prefer:0"), "{line}");
    }

    #[test]
    fn this_machine_reads_without_error() {
        // Whatever this machine is: the probes answer, and a memory file system has no device
        // node.
        let _ = nodes();
        let _ = node_of_path(Path::new("/"));
        assert_eq!(node_of_path(Path::new("/nonexistent/x")), None);
    }
}
