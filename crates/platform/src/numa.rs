//! Which NUMA node a storage device or a network interface hangs off, and which CPUs each node
//! has, from sysfs: so that a link's latency buffer lives and its writer runs on the node of the
//! device it writes, and the network receiver on the node of the NIC it reads (the papers'
//! per-socket layout). On a machine with one node there is nothing to place, and the recorder
//! says so.

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

/// A network interface, and the NUMA node its device hangs off (None: a virtual interface such
/// as loopback, a device not attached to a node, or a machine that does not say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub name: String,
    pub node: Option<u32>,
}

impl std::fmt::Display for Nic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.node {
            Some(n) => write!(f, "{} (NUMA node {n})", self.name),
            None => write!(f, "{} (no NUMA node)", self.name),
        }
    }
}

/// The interface that holds `ip`, and its node (`/sys/class/net/IF` leads to the device, whose
/// PCI function gives `numa_node`). None for an unspecified address (0.0.0.0, ::: every
/// interface) or one no interface holds.
pub fn nic_of(ip: std::net::IpAddr) -> Option<Nic> {
    if ip.is_unspecified() {
        return None;
    }
    let name = interface_holding(ip)?;
    let entry = std::fs::canonicalize(Path::new("/sys/class/net").join(&name)).ok();
    Some(Nic {
        node: entry.as_deref().and_then(node_above),
        name,
    })
}

/// The name of the interface one of whose addresses is `ip`, from getifaddrs(3).
fn interface_holding(ip: std::net::IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list that freeifaddrs releases below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*at };
        at = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
        let addr = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    Some(std::net::IpAddr::from(
                        u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                    ))
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    Some(std::net::IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            }
        };
        if addr == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
        }
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
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
    fn the_loopback_address_is_on_lo_which_has_no_node() {
        let lo = nic_of("127.0.0.1".parse().unwrap()).expect("every Linux has lo");
        assert_eq!(lo.name, "lo");
        assert_eq!(lo.node, None, "a virtual interface hangs off no node");
        assert_eq!(nic_of("0.0.0.0".parse().unwrap()), None, "every interface");
        // TEST-NET-3 (RFC 5737): documentation only, held by no interface.
        assert_eq!(nic_of("203.0.113.77".parse().unwrap()), None);
        assert_eq!(lo.to_string(), "lo (no NUMA node)");
    }

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
