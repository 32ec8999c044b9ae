//! Test hosts in network namespaces, for trials that cut the network: each host its own
//! namespace with one interface and one address, joined by veth pairs to a bridge in the test's
//! own namespace (which has an address on it too: the operator's host). A partition is a table
//! of nftables rules inside a host's namespace that drops every packet to and from the addresses
//! it is cut off from, as a failed switch port or a cut fibre looks (nothing answers, no reset).
//!
//! Every address is one of these namespaces' own, in 198.18.0.0/15 (set aside for testing
//! network devices, RFC 2544); nothing routes anywhere else. The test's namespace gets a
//! blackhole route for that whole range, left in place: a command still running after its net
//! is gone (a test that panicked) sends nothing off the machine. Everything else is removed on
//! drop.
//! Needs root, `ip` (iproute2) and `nft` (nftables): without them, `TestNet::create` says why
//! and the caller runs without partitions, unless SNBUF_REQUIRE_ROOT is set (CI), where it fails.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::output_within;

pub struct TestNet {
    /// A short tag unique to this process and net, in every name it makes.
    tag: String,
    bridge: String,
    /// The third byte of the /24 this net uses: 198.18.N.0/24.
    subnet: u8,
    pub hosts: Vec<Host>,
    bridge_made: bool,
}

pub struct Host {
    pub name: String,
    /// The host's network namespace.
    pub netns: String,
    pub ip: String,
    /// Cut off from these addresses now (empty: not partitioned).
    pub cut_from: Vec<String>,
}

/// Runs `ip`/`nft` with `args`, held to 20 s; Err with what it said.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let o = output_within(cmd, Duration::from_secs(20));
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

fn tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.exists())
}

impl TestNet {
    /// A net of hosts named `names` (each its own namespace), or None, having said why, where
    /// this machine cannot make one (not root, no `ip` or `nft`).
    pub fn create(names: &[String]) -> Option<TestNet> {
        let root = is_root();
        let why = if !root {
            Some("not root")
        } else if tool("ip").is_none() {
            Some("no `ip` (iproute2)")
        } else if tool("nft").is_none() {
            Some("no `nft` (nftables)")
        } else {
            None
        };
        if let Some(why) = why {
            assert!(
                std::env::var_os("SNBUF_REQUIRE_ROOT").is_none(),
                "SNBUF_REQUIRE_ROOT is set but network namespaces cannot be made here: {why}"
            );
            eprintln!("skip: network partitions need root, ip and nft ({why})");
            return None;
        }
        // Nothing for 198.18/15 leaves this machine, whatever happens to the bridge.
        if let Err(e) = run("ip", &["route", "replace", "blackhole", "198.18.0.0/15"]) {
            assert!(
                std::env::var_os("SNBUF_REQUIRE_ROOT").is_none(),
                "SNBUF_REQUIRE_ROOT is set but routes cannot be set here: {e}"
            );
            eprintln!("skip: network partitions need to set routes ({e})");
            return None;
        }
        let (tag, subnet) = free_tag_and_subnet();
        let mut net = TestNet {
            bridge: format!("sb{tag}br"),
            tag,
            subnet,
            hosts: Vec::new(),
            bridge_made: false,
        };
        // Whatever fails from here is undone by drop.
        let made = (|| -> Result<(), String> {
            run("ip", &["link", "add", &net.bridge, "type", "bridge"])?;
            net.bridge_made = true;
            run("ip", &["link", "set", &net.bridge, "up"])?;
            let gw = format!("{}/24", net.gateway_ip());
            run("ip", &["addr", "add", &gw, "dev", &net.bridge])?;
            for (i, name) in names.iter().enumerate() {
                net.add_host(name, 10 + i as u8)?;
            }
            Ok(())
        })();
        if let Err(e) = made {
            assert!(
                std::env::var_os("SNBUF_REQUIRE_ROOT").is_none() || net.bridge_made,
                "SNBUF_REQUIRE_ROOT is set but the test network cannot be made: {e}"
            );
            if !net.bridge_made {
                // Root without the right to make interfaces (a container): no partitions here.
                eprintln!("skip: network partitions: {e}");
                return None;
            }
            panic!("could not make the test network: {e}");
        }
        Some(net)
    }

    /// The test process's own address on the net (the operator's host).
    pub fn gateway_ip(&self) -> String {
        format!("198.18.{}.1", self.subnet)
    }

    fn add_host(&mut self, name: &str, last: u8) -> Result<(), String> {
        let netns = format!("sb{}{name}", self.tag);
        let veth = format!("sb{}{name}", self.tag);
        assert!(veth.len() <= 15, "interface name {veth} too long");
        let ip = format!("198.18.{}.{last}", self.subnet);
        run("ip", &["netns", "add", &netns])?;
        self.hosts.push(Host {
            name: name.to_string(),
            netns: netns.clone(),
            ip: ip.clone(),
            cut_from: Vec::new(),
        });
        run(
            "ip",
            &[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
            ],
        )?;
        run("ip", &["link", "set", &veth, "master", &self.bridge])?;
        run("ip", &["link", "set", &veth, "up"])?;
        let cidr = format!("{ip}/24");
        run("ip", &["-n", &netns, "addr", "add", &cidr, "dev", "eth0"])?;
        run("ip", &["-n", &netns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &netns, "link", "set", "lo", "up"])?;
        Ok(())
    }

    pub fn host(&self, name: &str) -> &Host {
        self.hosts
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no host {name}"))
    }

    /// `program` to be run inside host `name`'s namespace (`ip netns exec`, which execs it: the
    /// child's pid is the program's).
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(tool("ip").expect("checked"));
        cmd.args(["netns", "exec", &self.host(name).netns])
            .arg(program);
        cmd
    }

    /// Cuts host `name` off from the addresses `from`, both ways: every packet dropped.
    pub fn partition(&mut self, name: &str, from: &[String]) {
        assert!(!from.is_empty(), "a partition cuts off something");
        let netns = self.host(name).netns.clone();
        let set = from.join(", ");
        let rules = format!(
            "table inet snbuf_partition {{\n\
               chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n\
               chain output {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        let file = std::env::temp_dir().join(format!("snbuf-partition-{netns}.nft"));
        std::fs::write(&file, rules).unwrap();
        run(
            "ip",
            &["netns", "exec", &netns, "nft", "-f", file.to_str().unwrap()],
        )
        .unwrap();
        let _ = std::fs::remove_file(&file);
        let h = self.hosts.iter_mut().find(|h| h.name == name).unwrap();
        h.cut_from = from.to_vec();
    }

    /// Heals host `name`'s partition.
    pub fn heal(&mut self, name: &str) {
        let netns = self.host(name).netns.clone();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &netns,
                "nft",
                "delete",
                "table",
                "inet",
                "snbuf_partition",
            ],
        )
        .unwrap();
        self.hosts
            .iter_mut()
            .find(|h| h.name == name)
            .unwrap()
            .cut_from
            .clear();
    }
}

impl Drop for TestNet {
    /// The veth pairs first (deleting the root end removes both at once, whatever still runs in
    /// the namespace), then the namespaces and the bridge.
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = run("ip", &["link", "del", &format!("sb{}{}", self.tag, h.name)]);
            let _ = run("ip", &["netns", "del", &h.netns]);
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
    }
}

/// A tag no interface or namespace of this machine has, and a /24 of 198.18.0.0/16 no interface
/// has an address in: another run's, or one a killed run left behind, is never shared.
fn free_tag_and_subnet() -> (String, u8) {
    let links = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let namespaces = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut cmd = Command::new("ip");
    cmd.args(["-4", "-o", "addr", "show"]);
    let addrs =
        String::from_utf8_lossy(&output_within(cmd, Duration::from_secs(20)).stdout).into_owned();
    let start = std::process::id() as u64 ^ snbuf_quantity::now_unix_ns();
    for k in 0..4096u64 {
        let n = start.wrapping_add(k);
        let tag = format!("{:04x}", n % 0x10000);
        let subnet = (n % 250 + 1) as u8;
        let taken = links
            .iter()
            .chain(&namespaces)
            .any(|l| l.starts_with(&format!("sb{tag}")))
            || addrs.contains(&format!(" 198.18.{subnet}."));
        if !taken {
            return (tag, subnet);
        }
    }
    panic!("no free tag and subnet for a test network");
}

/// Whether this process runs as root (from /proc: no unsafe call for it).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
