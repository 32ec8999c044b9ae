//! The result schema (docs/RESULTS.md) and its exports: JSON for machines, CSV for spreadsheets.
//!
//! One results file is `{"schema_version", "machine", "results": [...]}`. Raw numbers only, with
//! the unit in every field name; human units are for the terminal.

use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;

pub const SCHEMA_VERSION: u32 = 1;

/// One results file. Only `results` must be there: a reader of older or hand-made files takes
/// the rest as empty.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results<R> {
    #[serde(default)]
    pub schema_version: u32,
    #[serde(default)]
    pub suite: String,
    #[serde(default)]
    pub machine: Machine,
    pub results: Vec<R>,
}

/// Latency percentiles in nanoseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct LatencyNs {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    pub mean: f64,
    pub samples: u64,
}

/// One point of a `bench write` or `bench read` sweep. A field an older version did not write
/// reads as zero or empty.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ThroughputResult {
    /// `write` or `read`.
    pub suite: String,
    pub method: String,
    /// Target paths, comma-separated (one per thread when several: the non-interleaved case).
    pub target: String,
    pub targets: usize,
    pub block_size_bytes: u64,
    /// Bytes each block occupies on the target (block size padded to the medium's alignment).
    pub slot_bytes: u64,
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub pattern: String,
    /// Page size asked for (mapping and DRAM buffers).
    pub page_size_bytes: u64,
    /// Page size the kernel granted for the target mapping or staging buffers (smaps).
    pub page_size_obtained_bytes: Option<u64>,
    /// Page size the kernel granted for the DRAM source buffers of writes.
    pub source_page_size_obtained_bytes: Option<u64>,
    /// `op`, `end`, or a byte count between persist points.
    pub persist_every: String,
    /// How a persist point makes data durable here (`map_sync`, `msync`, `fdatasync`, `o_dsync`,
    /// `volatile` for RAM-only media such as tmpfs).
    pub durability: String,
    pub instruction_path: String,
    pub queue_depth: Option<u32>,
    pub region_bytes_per_thread: u64,
    pub bytes: u64,
    pub ops: u64,
    pub seconds: f64,
    pub gib_per_s: f64,
    pub mops_per_s: f64,
    pub per_thread_gib_per_s: Vec<f64>,
    /// CPU the benchmark threads used in the timed window (their thread clocks: user and
    /// system, the kernel's share of each write included) per GiB moved: what a recorder's
    /// writers compare themselves with.
    pub cpu_core_s_per_gib: f64,
    /// Time each operation took as seen by the calling thread, including any persist it ran.
    /// `samples` is 0 when per-operation timing was off (`latency_every` 0).
    pub latency_ns: LatencyNs,
    /// 1: every operation timed; N: a random sample of one in N on average; 0: none.
    pub latency_every: u32,
    /// For queued methods (uring): submission to completion of each write.
    pub completion_latency_ns: Option<LatencyNs>,
    /// Reads whose content was checked against what the prefill wrote.
    pub verified_ops: u64,
    pub notes: Vec<String>,
}

/// Writes `results` of `suite`, measured on `machine`, as a results document at `path`.
pub fn save<R: Serialize + Clone>(
    path: &Path,
    suite: &str,
    machine: &Machine,
    results: &[R],
) -> Result<(), crate::error::BenchError> {
    let doc = Results {
        schema_version: SCHEMA_VERSION,
        suite: suite.to_string(),
        machine: machine.clone(),
        results: results.to_vec(),
    };
    write_json(path, &doc).map_err(|cause| crate::error::BenchError::Write {
        path: path.to_path_buf(),
        cause,
    })
}

pub fn write_json<R: Serialize>(path: &Path, results: &Results<R>) -> io::Result<()> {
    let mut f = io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut f, results).map_err(io::Error::other)?;
    f.write_all(b"\n")?;
    f.flush()
}

pub const THROUGHPUT_CSV_HEADER: &str = "suite,method,target,targets,block_size_bytes,slot_bytes,threads,pattern,\
page_size_bytes,page_size_obtained_bytes,persist_every,durability,instruction_path,queue_depth,bytes,ops,seconds,\
gib_per_s,mops_per_s,cpu_core_s_per_gib,latency_p50_ns,latency_p99_ns,latency_p999_ns,latency_max_ns,\
completion_p50_ns,completion_p99_ns,completion_max_ns";

pub fn write_throughput_csv(path: &Path, results: &[ThroughputResult]) -> io::Result<()> {
    let mut f = io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{THROUGHPUT_CSV_HEADER}")?;
    let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
    for r in results {
        let c = r.completion_latency_ns;
        writeln!(
            f,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{},{},{},{},{},{},{}",
            r.suite,
            r.method,
            csv_field(&r.target),
            r.targets,
            r.block_size_bytes,
            r.slot_bytes,
            r.threads,
            r.pattern,
            r.page_size_bytes,
            opt(r.page_size_obtained_bytes),
            r.persist_every,
            r.durability,
            csv_field(&r.instruction_path),
            opt(r.queue_depth.map(u64::from)),
            r.bytes,
            r.ops,
            r.seconds,
            r.gib_per_s,
            r.mops_per_s,
            r.cpu_core_s_per_gib,
            r.latency_ns.p50,
            r.latency_ns.p99,
            r.latency_ns.p999,
            r.latency_ns.max,
            opt(c.map(|c| c.p50)),
            opt(c.map(|c| c.p99)),
            opt(c.map(|c| c.max)),
        )?;
    }
    f.flush()
}

/// Quotes a CSV field when it holds a comma or a quote (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_with_commas_are_quoted() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"x\""), "\"say \"\"x\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
