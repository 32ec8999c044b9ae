//! The machine a result was measured on: CPU, SIMD path, kernel, page size, and per target its
//! file system, DAX or not, and direct-I/O alignment. Every results file carries it, because a
//! figure without its machine cannot be compared with anything.

use std::path::Path;

use serde::{Deserialize, Serialize};
use snbuf_persist::medium;
use snbuf_platform::cpu::CpuFeatures;

/// The machine a results file was measured on. A field an older version did not write reads as
/// empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Machine {
    pub hostname: String,
    pub cpu_model: String,
    pub logical_cpus: usize,
    /// Persistence-relevant CPU flags present (sse2, avx2, avx512f, clflush, clflushopt, clwb).
    pub cpu_flags: Vec<String>,
    /// The non-temporal store path the `nt` method uses on this CPU.
    pub simd_path: String,
    pub kernel: String,
    pub page_size_bytes: u64,
    pub transparent_hugepages: String,
    pub numa_nodes: usize,
    /// The clock that timed single operations.
    pub op_clock: String,
    pub git_commit: String,
    pub snbuf_version: String,
    pub targets: Vec<TargetMachine>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TargetMachine {
    pub path: String,
    pub filesystem: String,
    pub dax: bool,
    /// RAM-only file system (tmpfs): figures there measure instructions, not durability.
    pub volatile: bool,
    pub dio_align_bytes: u64,
}

impl Machine {
    pub fn probe(targets: &[&Path], op_clock: String, git_commit: &str) -> Self {
        let cpu = CpuFeatures::detect();
        Machine {
            hostname: read_trim("/proc/sys/kernel/hostname"),
            cpu_model: cpu_model(),
            logical_cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_flags: cpu.flag_names().into_iter().map(String::from).collect(),
            simd_path: cpu
                .simd_path()
                .map(|p| p.name())
                .unwrap_or("none")
                .to_string(),
            kernel: format!(
                "{} {}",
                read_trim("/proc/sys/kernel/ostype"),
                read_trim("/proc/sys/kernel/osrelease")
            ),
            // SAFETY: sysconf has no preconditions.
            page_size_bytes: unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64,
            transparent_hugepages: selected("/sys/kernel/mm/transparent_hugepage/enabled"),
            numa_nodes: numa_nodes(),
            op_clock,
            git_commit: git_commit.to_string(),
            snbuf_version: env!("CARGO_PKG_VERSION").to_string(),
            targets: targets.iter().map(|p| TargetMachine::probe(p)).collect(),
        }
    }
}

impl TargetMachine {
    pub fn probe(path: &Path) -> Self {
        match medium::probe(path) {
            Ok(m) => TargetMachine {
                path: path.display().to_string(),
                dio_align_bytes: m.dio_align_bytes(),
                filesystem: m.fs_type,
                dax: m.dax,
                volatile: m.volatile,
            },
            Err(e) => TargetMachine {
                path: path.display().to_string(),
                filesystem: format!("unknown ({e})"),
                dax: false,
                volatile: false,
                dio_align_bytes: medium::FALLBACK_DIO_ALIGN_BYTES,
            },
        }
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string())
}

/// The bracketed choice in a sysfs selector such as `always [madvise] never`.
fn selected(path: &str) -> String {
    let s = read_trim(path);
    match (s.find('['), s.find(']')) {
        (Some(a), Some(b)) if a < b => s[a + 1..b].to_string(),
        _ => s,
    }
}

fn numa_nodes() -> usize {
    std::fs::read_dir("/sys/devices/system/node")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name();
                    let n = n.to_string_lossy();
                    n.starts_with("node") && n[4..].chars().all(|c| c.is_ascii_digit())
                })
                .count()
                .max(1)
        })
        .unwrap_or(1)
}

/// The last-level cache size in bytes, from sysfs (largest cache index of CPU 0).
pub fn last_level_cache_bytes() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let s = std::fs::read_to_string(e.path().join("size")).ok()?;
            let s = s.trim();
            let (n, mult) = if let Some(k) = s.strip_suffix('K') {
                (k, 1024)
            } else if let Some(m) = s.strip_suffix('M') {
                (m, 1024 * 1024)
            } else {
                (s, 1)
            };
            n.parse::<u64>().ok().map(|v| v * mult)
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_record_is_filled_in() {
        let tmp = std::env::temp_dir();
        let m = Machine::probe(&[tmp.as_path()], "test".into(), "abc");
        assert!(m.logical_cpus >= 1);
        assert_ne!(m.cpu_model, "");
        assert_eq!(m.targets.len(), 1);
        assert!(m.page_size_bytes >= 4096);
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains("\"simd_path\""));
    }
}
