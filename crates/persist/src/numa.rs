//! Which NUMA node a storage device hangs off, and which CPUs each node has, from sysfs: so that
//! a link's writer runs on the node of the device it writes (the papers' per-socket layout). On a
//! machine with one node there is nothing to place, and the recorder says so.

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
    fn this_machine_reads_without_error() {
        // Whatever this machine is: the probes answer, and a memory file system has no device
        // node.
        let _ = nodes();
        let _ = node_of_path(Path::new("/"));
        assert_eq!(node_of_path(Path::new("/nonexistent/x")), None);
    }
}
