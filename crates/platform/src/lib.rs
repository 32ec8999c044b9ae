//! snbuf-platform: what snbuf needs of the machine, below any notion of storage or readout.
//!
//! CPU features, clocks and pinning (`cpu`), NUMA nodes (`numa`), aligned and huge-page memory
//! (`memory`), cache-line flushes, fences and streaming copies (`instructions`), CRC-32C
//! (`crc`), a small seeded RNG (`rng`), process CPU time (`process`), and the `HeldMemory`
//! contract by which a buffer's owner keeps memory alive for a reader. persist, readout and bench
//! build on it; it depends on none of them.

pub mod cpu;
pub mod crc;
pub mod held;
#[cfg(target_arch = "x86_64")]
pub mod instructions;
pub mod memory;
pub mod numa;
pub mod process;
pub mod rng;

pub use held::{HeldMemory, Hold};
pub use memory::{AlignedBuf, PageSize, PagesObtained};
