//! What an export sends for each file of a burst: the file as it is, or (`ExportCodec::Frames`)
//! each link file coded (`snbuf_burst::coded_link`: a third of the bytes of DUNE's ADC data)
//! and a copy of the manifest that says so. The coded files are made in the burst directory,
//! under `.export-coded/`, each checked to decode to its link file before it is sent, and
//! removed when the export ends (`Staging`'s drop), verified or not. Coding is deterministic:
//! a run that resumes sends the same bytes, so the parts an earlier run sent still fit.
//!
//! The link files are coded by worker threads (one a core) while the export sends those
//! already coded: the export waits for a file only when the link is faster than the coding.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use snbuf_burst::coded_link::{self, CodedLinkError, CODEC_NAME, SUFFIX};
use snbuf_burst::manifest::link_of_file_name;
use snbuf_burst::Manifest;
use snbuf_frames::FrameType;

use crate::{io, ExportError};

/// How an export sends a burst's link files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExportCodec {
    /// As they are.
    #[default]
    None,
    /// Through the frame codec, as `<file>.snbl`; the manifest sent says `coded`.
    Frames,
}

impl std::str::FromStr for ExportCodec {
    type Err = String;

    /// As the command line and the config file say it: `none` or `frames`.
    fn from_str(s: &str) -> Result<ExportCodec, String> {
        match s {
            "none" => Ok(ExportCodec::None),
            "frames" => Ok(ExportCodec::Frames),
            other => Err(format!("codec '{other}': none or frames")),
        }
    }
}

/// Where coded files are made, in the burst directory.
pub const STAGING_DIR: &str = ".export-coded";

/// One object to send: its name (the key's last part, and the export record's `file`) and the
/// local file that holds its bytes.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub name: String,
    pub path: PathBuf,
}

/// The objects of an export, in order, each ready or being coded.
pub struct Staging {
    objects: Vec<Pending>,
    /// Set when the export ends: workers code no further file.
    cancel: Arc<AtomicBool>,
    /// The directory of coded files, removed when the export ends, whichever way: they are
    /// made again (the same bytes) by the next run, and a full disk is not left full.
    made: Option<PathBuf>,
}

enum Pending {
    Ready(Outgoing),
    Coding {
        staged: Outgoing,
        done: Receiver<Result<(), ExportError>>,
        /// Longest to wait for it: its file at a crawl (`CODING_FLOOR_BYTES_PER_S`), and a minute.
        deadline: Duration,
    },
}

/// The slowest coding waited for: far below any core's, so that only a stuck worker (a stalled
/// disk) reaches it.
const CODING_FLOOR_BYTES_PER_S: u64 = 5_000_000;

impl Staging {
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Object `i`, once ready: a coded file only once it is made and checked.
    pub fn get(&mut self, i: usize) -> Result<Outgoing, ExportError> {
        match &self.objects[i] {
            Pending::Ready(s) => Ok(s.clone()),
            Pending::Coding {
                staged,
                done,
                deadline,
            } => {
                let result = done.recv_timeout(*deadline).map_err(|e| match e {
                    RecvTimeoutError::Timeout => ExportError::Store(format!(
                        "{}: not coded within {} s",
                        staged.path.display(),
                        deadline.as_secs()
                    )),
                    RecvTimeoutError::Disconnected => ExportError::Usage(format!(
                        "{}: the coding worker ended without a word",
                        staged.path.display()
                    )),
                });
                let staged = staged.clone();
                result??;
                self.objects[i] = Pending::Ready(staged.clone());
                Ok(staged)
            }
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(dir) = &self.made {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One link file to code.
struct Job {
    src: PathBuf,
    dst: PathBuf,
    link: u32,
    done: mpsc::Sender<Result<(), ExportError>>,
}

/// The objects of the burst in `dir` whose files are `files` (link files, then the manifest
/// last), as `codec` sends them; link files to code are coded in the background.
pub fn stage(dir: &Path, files: &[String], codec: ExportCodec) -> Result<Staging, ExportError> {
    let as_is = |f: &String| Outgoing {
        name: f.clone(),
        path: dir.join(f),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    if codec == ExportCodec::None {
        let objects = files.iter().map(|f| Pending::Ready(as_is(f))).collect();
        return Ok(Staging {
            objects,
            cancel,
            made: None,
        });
    }
    let mut manifest = Manifest::read(dir).map_err(|e| ExportError::Usage(e.to_string()))?;
    let frame_type = coded_frame_type(dir, &manifest)?;
    let staging = dir.join(STAGING_DIR);
    std::fs::create_dir_all(&staging).map_err(io(&staging))?;
    // From here on, a failure removes what was made (`Staging`'s drop).
    let mut staged = Staging {
        objects: Vec::with_capacity(files.len()),
        cancel: cancel.clone(),
        made: Some(staging.clone()),
    };
    let objects = &mut staged.objects;
    let mut jobs = Vec::new();
    for f in files {
        if f == "manifest.json" {
            continue;
        }
        let Some(link) = link_of_file_name(f) else {
            objects.push(Pending::Ready(as_is(f)));
            continue;
        };
        let src = dir.join(f);
        let size = std::fs::metadata(&src).map_err(io(&src))?.len();
        let name = format!("{f}{SUFFIX}");
        let dst = staging.join(&name);
        let (tx, rx) = mpsc::channel();
        jobs.push(Job {
            src,
            dst: dst.clone(),
            link,
            done: tx,
        });
        objects.push(Pending::Coding {
            staged: Outgoing { name, path: dst },
            done: rx,
            deadline: Duration::from_secs(60 + size / CODING_FLOOR_BYTES_PER_S),
        });
    }
    manifest.coded = Some(CODEC_NAME.to_string());
    objects.push(Pending::Ready(coded_manifest(&staging, &manifest)?));
    debug_assert_eq!(objects.len(), files.len(), "every file staged once");
    start_workers(jobs, frame_type, cancel);
    Ok(staged)
}

/// The frame type the burst's manifest names, which the codec models.
fn coded_frame_type(dir: &Path, manifest: &Manifest) -> Result<FrameType, ExportError> {
    manifest
        .frame
        .as_ref()
        .and_then(|f| f.frame_type.parse().ok())
        .ok_or_else(|| {
            ExportError::Usage(format!(
                "{}: the manifest names no frame type the codec knows",
                dir.display()
            ))
        })
}

/// The manifest sent with coded link files (it says `coded`), written into `staging`.
fn coded_manifest(staging: &Path, manifest: &Manifest) -> Result<Outgoing, ExportError> {
    assert!(manifest.coded.is_some(), "the copy sent says it is coded");
    let path = staging.join("manifest.json");
    let json = serde_json::to_vec_pretty(manifest).expect("a manifest serialises");
    std::fs::write(&path, json).map_err(io(&path))?;
    Ok(Outgoing {
        name: "manifest.json".into(),
        path,
    })
}

/// Codes `jobs` in order on a thread a core, each result sent to its object.
fn start_workers(jobs: Vec<Job>, frame_type: FrameType, cancel: Arc<AtomicBool>) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = cores.min(jobs.len());
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    for _ in 0..workers {
        let (jobs, next, cancel) = (jobs.clone(), next.clone(), cancel.clone());
        std::thread::spawn(move || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else { return };
            if cancel.load(Ordering::Relaxed) {
                return;
            }
            let result = coded_link::encode_link_file(&job.src, frame_type, job.link, &job.dst)
                .map_err(|e| match e {
                    // The machine's trouble (a full disk, a failed read), not the user's.
                    CodedLinkError::Io { path, cause } => ExportError::Io { path, cause },
                    corrupt => ExportError::Verify {
                        key: job.dst.display().to_string(),
                        why: corrupt.to_string(),
                    },
                })
                .and_then(|coded| check_decodes(&job.dst, coded));
            // The export may have ended: no one to tell.
            let _ = job.done.send(result);
        });
    }
}

/// The coded file at `path` decodes to the link file it was made from (its length and
/// CRC-32C): what is sent is the data, whatever the codec did.
fn check_decodes(path: &Path, coded: coded_link::Coded) -> Result<(), ExportError> {
    let mut sink = CrcSink::default();
    let decoded = coded_link::decode_link_file(path, &mut sink, coded_link::OnDamage::Refuse);
    let len = decoded.map(|d| d.len).map_err(|e| ExportError::Verify {
        key: path.display().to_string(),
        why: format!("the coded file does not decode: {e}"),
    })?;
    if (len, sink.crc) != (coded.raw_bytes, coded.raw_crc32c) {
        return Err(ExportError::Verify {
            key: path.display().to_string(),
            why: "the coded file decodes to other bytes than the link file's".into(),
        });
    }
    Ok(())
}

/// A writer that keeps the CRC-32C of what it is given.
#[derive(Default)]
struct CrcSink {
    crc: u32,
}

impl std::io::Write for CrcSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
