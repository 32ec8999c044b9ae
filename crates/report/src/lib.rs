//! snbuf-report: the papers' figures and tables from a `snbuf bench paper` results directory.
//!
//! It reads the results as JSON values (the schema of docs/RESULTS.md), so a report can be
//! drawn from results of any snbuf version that has the fields it plots. Every figure is written
//! as SVG and PNG under the papers' names; report.md and report.html show the machine, the
//! tables and the figures, and list every check a result failed (a join with a wrong result, a
//! huge-page run that got 4 KiB pages, a latency that looks like a cache hit).

#![forbid(unsafe_code)]

mod figures;
mod page;
pub mod plot;

use std::path::{Path, PathBuf};

use serde_json::Value;

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

/// The results files a paper run writes, by suite.
pub const SUITE_FILES: &[(&str, &str)] = &[
    ("write", "write.json"),
    ("read", "read.json"),
    ("write-second", "write-second.json"),
    ("read-second", "read-second.json"),
    ("latency", "latency.json"),
    ("join", "join.json"),
    ("kernels", "kernels.json"),
    ("app", "app.json"),
];

/// The results directory, loaded.
pub struct ResultsDir {
    pub dir: PathBuf,
    /// `paper.json`: the run's own record (targets, scale, time), if present.
    pub paper: Option<Value>,
    /// Suite name → its results document.
    pub suites: Vec<(String, Value)>,
}

impl ResultsDir {
    pub fn load(dir: &Path) -> Result<ResultsDir, ReportError> {
        let read = |p: &Path| -> Result<Option<Value>, ReportError> {
            match std::fs::read_to_string(p) {
                Ok(t) => serde_json::from_str(&t)
                    .map(Some)
                    .map_err(|e| ReportError::Parse(p.to_path_buf(), e.to_string())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ReportError::Io(p.to_path_buf(), e)),
            }
        };
        if !dir.is_dir() {
            return Err(ReportError::Io(
                dir.to_path_buf(),
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            ));
        }
        let paper = read(&dir.join("paper.json"))?;
        let mut suites = Vec::new();
        for (suite, file) in SUITE_FILES {
            let path = dir.join(file);
            if let Some(v) = read(&path)? {
                if !v["results"].is_array() {
                    return Err(ReportError::Parse(path, "no \"results\" array".into()));
                }
                suites.push((suite.to_string(), v));
            }
        }
        if suites.is_empty() {
            return Err(ReportError::Empty(dir.to_path_buf()));
        }
        Ok(ResultsDir {
            dir: dir.to_path_buf(),
            paper,
            suites,
        })
    }

    pub fn results(&self, suite: &str) -> &[Value] {
        self.suites
            .iter()
            .find(|(s, _)| s == suite)
            .and_then(|(_, v)| v["results"].as_array())
            .map(|a| a.as_slice())
            .unwrap_or(&[])
    }

    /// The machine record of the first suite (all suites of a run share it).
    pub fn machine(&self) -> &Value {
        &self.suites[0].1["machine"]
    }
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

/// A number field of a result, NaN when absent.
pub(crate) fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

pub(crate) fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
