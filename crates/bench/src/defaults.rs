//! What a benchmark measures when not told: /dev/shm as the medium (the stand-in for persistent
//! memory), regions far larger than the cache, every thread count up to the CPUs this process
//! may use, and the papers' "without and with PMDK" methods.

use std::path::{Path, PathBuf};

use snbuf_persist::Method;
use snbuf_platform::cpu;

use crate::machine::last_level_cache_bytes;

/// The default target: /dev/shm stands in for persistent memory where it exists.
pub fn default_target() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// 4x the last-level cache, at least 256 MiB: large enough that no figure is a cache figure.
pub fn default_region_bytes() -> u64 {
    let llc = last_level_cache_bytes().unwrap_or(32 << 20);
    (4 * llc).max(256 << 20)
}

/// 1 up to the number of CPUs this process may use.
pub fn default_threads() -> Vec<usize> {
    (1..=cpu::allowed_cpus().len()).collect()
}

/// nt, and pmdk when this snbuf has it: the paper's "without and with PMDK".
pub fn default_app_methods() -> Vec<Method> {
    let mut v = vec![Method::Nt];
    if Method::Pmdk.compiled_in() {
        v.push(Method::Pmdk);
    }
    v
}
