//! snbuf-report: the papers' figures and tables from a `snbuf bench paper` results directory.
//!
//! It reads each results file as the bench suite's own result type (docs/RESULTS.md), so the
//! report and the suites share one schema. A field an older snbuf did not write reads as zero
//! or empty, so a report can still be drawn from older results that have the fields it plots.
//! Every figure is written as SVG and PNG under the papers' names; report.md and report.html
//! show the machine, the tables and the figures, and list every check a result failed (a join
//! with a wrong result, a huge-page run that got 4 KiB pages, a latency that looks like a cache
//! hit).

#![forbid(unsafe_code)]

mod figures;
mod page;
pub mod plot;

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use snbuf_bench::join::JoinResult;
use snbuf_bench::kernels::KernelResult;
use snbuf_bench::latency::LatencyResult;
use snbuf_bench::paper::PaperRecord;
use snbuf_bench::{Machine, Results, ThroughputResult};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0}: not a results file: {1}")]
    Parse(PathBuf, String),
    #[error("{0}: no results in it (expected the files of `snbuf bench paper`: write.json, latency.json, ...)")]
    Empty(PathBuf),
    #[error("{0}")]
    Font(String),
    #[error("plot {0}: {1}")]
    Plot(String, String),
}

/// The throughput sweeps a paper run writes (each a `ThroughputResult` list), by suite and file.
pub const THROUGHPUT_FILES: &[(&str, &str)] = &[
    ("write", "write.json"),
    ("read", "read.json"),
    ("write-second", "write-second.json"),
    ("read-second", "read-second.json"),
    ("app", "app.json"),
];

/// The results directory, loaded.
pub struct ResultsDir {
    pub dir: PathBuf,
    /// `paper.json`: the run's own record (targets, scale, time), if present.
    pub paper: Option<PaperRecord>,
    /// The machine of the first results file (all files of a run share it).
    pub machine: Machine,
    /// The throughput sweeps present, in `THROUGHPUT_FILES` order.
    pub throughput: Vec<(&'static str, Vec<ThroughputResult>)>,
    pub latency: Vec<LatencyResult>,
    pub join: Vec<JoinResult>,
    pub kernels: Vec<KernelResult>,
}

/// Reads `path` as `T`; a missing file is `None`.
fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, ReportError> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .map_err(|e| ReportError::Parse(path.to_path_buf(), e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReportError::Io(path.to_path_buf(), e)),
    }
}

impl ResultsDir {
    pub fn load(dir: &Path) -> Result<ResultsDir, ReportError> {
        if !dir.is_dir() {
            return Err(ReportError::Io(
                dir.to_path_buf(),
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            ));
        }
        let mut machine = None;
        let mut throughput = Vec::new();
        for (name, file) in THROUGHPUT_FILES {
            if let Some(doc) = read::<Results<ThroughputResult>>(&dir.join(file))? {
                machine.get_or_insert(doc.machine);
                throughput.push((*name, doc.results));
            }
        }
        let latency = read_results(&dir.join("latency.json"), &mut machine)?;
        let join = read_results(&dir.join("join.json"), &mut machine)?;
        let kernels = read_results(&dir.join("kernels.json"), &mut machine)?;
        let Some(machine) = machine else {
            return Err(ReportError::Empty(dir.to_path_buf()));
        };
        Ok(ResultsDir {
            dir: dir.to_path_buf(),
            paper: read(&dir.join("paper.json"))?,
            machine,
            throughput,
            latency,
            join,
            kernels,
        })
    }

    /// The results of throughput sweep `suite` (`write`, `read`, `write-second`, `read-second`
    /// or `app`); none when the run did not have it.
    pub fn throughput(&self, suite: &str) -> &[ThroughputResult] {
        assert!(
            THROUGHPUT_FILES.iter().any(|(s, _)| *s == suite),
            "{suite} is not a throughput sweep"
        );
        self.throughput
            .iter()
            .find(|(s, _)| *s == suite)
            .map(|(_, v)| v.as_slice())
            .unwrap_or(&[])
    }
}

/// The results of one suite's file, none when it is absent; the first machine seen is kept.
fn read_results<R: DeserializeOwned>(
    path: &Path,
    machine: &mut Option<Machine>,
) -> Result<Vec<R>, ReportError> {
    Ok(match read::<Results<R>>(path)? {
        Some(doc) => {
            machine.get_or_insert(doc.machine);
            doc.results
        }
        None => Vec::new(),
    })
}

/// One figure: its file stem (named after the paper's figure), title and what it shows.
pub struct Figure {
    pub stem: String,
    pub title: String,
    pub caption: String,
}

/// What `build` wrote.
pub struct Report {
    pub figures: Vec<Figure>,
    pub markdown: PathBuf,
    pub html: PathBuf,
    /// Checks that results failed (also listed in the report).
    pub findings: Vec<String>,
}

/// Draws every figure the results allow, and writes report.md and report.html into `out`.
pub fn build(results: &Path, out: &Path) -> Result<Report, ReportError> {
    let r = ResultsDir::load(results)?;
    std::fs::create_dir_all(out).map_err(|e| ReportError::Io(out.to_path_buf(), e))?;
    let figures = figures::draw_all(&r, out)?;
    let findings = page::findings(&r);
    let (markdown, html) = page::write(&r, &figures, &findings, out)?;
    Ok(Report {
        figures,
        markdown,
        html,
        findings,
    })
}
