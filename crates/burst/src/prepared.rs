//! A burst made ready before its trigger: directory, link files and open sinks.
//!
//! Why: opening a burst costs time in proportion to its window — allocating the files' blocks,
//! and on a mapped medium first-touching every page (measured on this project's VM: about 1 s
//! per 600 MiB on tmpfs). Done when the trigger arrives, that time is taken from the
//! pre-trigger data, which keeps ageing in the latency buffers meanwhile. A recorder prepares
//! the next burst while it waits, and a trigger only has to rename the directory and write the
//! manifest.
//!
//! A prepared burst lives in a hidden directory `.snbuf-next-<pid>-<n>` beside the bursts. It
//! holds no data (nothing is written before the trigger), so it is removed when dropped unused,
//! and `remove_stale` removes those a crashed process left.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use snbuf_persist::{PersistError, Sink};

use crate::burst_writer::{check_burst_id, BurstError, BurstSpec, BurstWriter};
use crate::manifest::{link_file_name, sync_dir};
use crate::writer::ChunkWriter;

const PREFIX: &str = ".snbuf-next-";

/// Directory, files and open sinks of a burst that has no trigger yet.
pub struct PreparedBurst<S: Sink> {
    parent: PathBuf,
    /// The hidden directory; `None` once it became a burst.
    dir: Option<PathBuf>,
    frame_bytes: u32,
    max_payload_bytes: usize,
    writers: Vec<ChunkWriter<S>>,
    links: Vec<u32>,
}

impl<S: Sink> PreparedBurst<S> {
    /// Creates the hidden directory in `parent` and opens a sink per link with
    /// `open_sink(link, path)`, which allocates (and on memory, maps and populates) its file.
    pub fn prepare(
        parent: &Path,
        links: &[u32],
        frame_bytes: u32,
        max_payload_bytes: usize,
        mut open_sink: impl FnMut(u32, &Path) -> Result<S, PersistError>,
    ) -> Result<Self, BurstError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).map_err(|cause| BurstError::Dir {
            path: dir.clone(),
            cause,
        })?;
        let mut prepared = PreparedBurst {
            parent: parent.to_path_buf(),
            dir: Some(dir.clone()),
            frame_bytes,
            max_payload_bytes,
            writers: Vec::new(),
            links: links.to_vec(),
        };
        // On any error below, dropping `prepared` removes the directory again.
        for &link in links {
            let path = dir.join(link_file_name(link));
            let sink = open_sink(link, &path).map_err(|cause| BurstError::Open {
                link,
                file: path.clone(),
                cause,
            })?;
            prepared.writers.push(ChunkWriter::new(
                sink,
                link,
                frame_bytes,
                max_payload_bytes,
            )?);
        }
        Ok(prepared)
    }

    /// Whether a burst of `spec` can use this preparation (same links and chunk shape).
    pub fn fits(&self, spec: &BurstSpec) -> bool {
        spec.links == self.links
            && spec.frame.frame_bytes == self.frame_bytes
            && spec.max_payload_bytes <= self.max_payload_bytes
    }

    /// Where the prepared files are (until `start`).
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Makes this the burst `spec`: renames the directory to `parent/<burst id>` (never over an
    /// existing one), makes the rename durable, and writes the manifest `recording`.
    pub fn start(mut self, spec: BurstSpec) -> Result<BurstWriter<S>, BurstError> {
        check_burst_id(&spec.burst_id)?;
        if !self.fits(&spec) {
            return Err(BurstError::Mismatch(format!(
                "prepared for links {:?} of {} B frames, up to {} B per chunk",
                self.links, self.frame_bytes, self.max_payload_bytes
            )));
        }
        let from = self.dir.clone().expect("a prepared burst starts once");
        let to = self.parent.join(&spec.burst_id);
        rename_no_replace(&from, &to).map_err(|cause| {
            if cause.kind() == std::io::ErrorKind::AlreadyExists {
                BurstError::Exists(to.clone())
            } else {
                BurstError::Dir {
                    path: to.clone(),
                    cause,
                }
            }
        })?;
        self.dir = None;
        sync_dir(&self.parent).map_err(|cause| BurstError::Dir {
            path: self.parent.clone(),
            cause,
        })?;
        let writers = std::mem::take(&mut self.writers);
        BurstWriter::from_writers(&from, to, spec, writers)
    }
}

impl<S: Sink> Drop for PreparedBurst<S> {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            // Close the sinks (unmap, close) before their files go.
            self.writers.clear();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Removes prepared directories in `parent` left by processes that no longer run (a crash
/// before their trigger). They never hold data. Returns how many were removed.
pub fn remove_stale(parent: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let entries = match std::fs::read_dir(parent) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() as i32 && !process_alive(pid) {
            std::fs::remove_dir_all(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// rename(2) that fails with `AlreadyExists` instead of replacing an (empty) directory.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in path"))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
