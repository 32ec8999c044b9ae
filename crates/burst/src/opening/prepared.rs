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

use crate::chunk_writer::ChunkWriter;
use crate::link_writer::BurstWriter;
use crate::manifest::link_file_name;
use crate::outputs::output_for;
use crate::spec::{check_burst_id, BurstError, BurstSpec};
use snbuf_persist::replace::sync_dir;

const PREFIX: &str = ".snbuf-next-";

/// Directory, files and open sinks of a burst that has no trigger yet.
pub struct PreparedBurst<S: Sink> {
    /// The outputs, the burst's home first (`outputs`).
    outputs: Vec<PathBuf>,
    /// The hidden directory's name, the same on every output used; `None` once it became a
    /// burst.
    name: Option<String>,
    /// The outputs that hold a hidden directory of this preparation (indices into `outputs`).
    used: Vec<usize>,
    frame_bytes: u32,
    max_payload_bytes: usize,
    writers: Vec<ChunkWriter<S>>,
    links: Vec<u32>,
    /// The lock on the home directory that says a burst is being recorded there
    /// (`recording_lock`), handed to the burst when it starts.
    recording: Option<std::fs::File>,
}

impl<S: Sink> PreparedBurst<S> {
    /// Creates the hidden directory in `parent` and opens a sink per link with
    /// `open_sink(link, path)`, which allocates (and on memory, maps and populates) its file.
    pub fn prepare(
        parent: &Path,
        links: &[u32],
        frame_bytes: u32,
        max_payload_bytes: usize,
        open_sink: impl FnMut(u32, &Path) -> Result<S, PersistError>,
    ) -> Result<Self, BurstError> {
        Self::prepare_on(
            &[parent.to_path_buf()],
            links,
            frame_bytes,
            max_payload_bytes,
            open_sink,
        )
    }

    /// As `prepare`, with the links spread over `outputs` (home first; see `outputs`): a hidden
    /// directory on each output used, each link's file on its own output.
    pub fn prepare_on(
        outputs: &[PathBuf],
        links: &[u32],
        frame_bytes: u32,
        max_payload_bytes: usize,
        mut open_sink: impl FnMut(u32, &Path) -> Result<S, PersistError>,
    ) -> Result<Self, BurstError> {
        assert!(!outputs.is_empty(), "a burst needs an output");
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // Absolute, so that the manifest and the symbolic links name files wherever the
        // reader runs from.
        let outputs: Vec<PathBuf> = outputs
            .iter()
            .map(|o| std::path::absolute(o).unwrap_or_else(|_| o.clone()))
            .collect();
        let mut prepared = PreparedBurst {
            outputs,
            name: Some(name.clone()),
            used: Vec::new(),
            frame_bytes,
            max_payload_bytes,
            writers: Vec::new(),
            links: links.to_vec(),
            recording: None,
        };
        // The home always (it holds the manifest), then every output a link lands on. On any
        // error below, dropping `prepared` removes the directories made so far.
        let mut used: Vec<usize> = vec![0];
        used.extend((0..links.len()).map(|i| i % prepared.outputs.len()));
        used.sort_unstable();
        used.dedup();
        for k in used {
            let dir = prepared.outputs[k].join(&name);
            std::fs::create_dir(&dir).map_err(|cause| BurstError::Dir {
                path: dir.clone(),
                cause,
            })?;
            if k == 0 {
                // Locked before it can be seen as a burst: it is never taken for interrupted.
                prepared.recording = crate::recording_lock::hold(&dir);
            }
            prepared.used.push(k);
        }
        for (i, &link) in links.iter().enumerate() {
            let path = output_for(&prepared.outputs, i)
                .join(&name)
                .join(link_file_name(link));
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

    /// Where the prepared files are on the home output (until `start`).
    pub fn dir(&self) -> Option<PathBuf> {
        self.name.as_ref().map(|n| self.outputs[0].join(n))
    }

    /// Makes this the burst `spec`: renames the directory on each output to `<burst id>`
    /// (never over an existing one), links the files on other outputs into the home's burst
    /// directory, makes all of it durable, and writes the manifest `recording`.
    pub fn start(mut self, spec: BurstSpec) -> Result<BurstWriter<S>, BurstError> {
        check_burst_id(&spec.burst_id)?;
        if !self.fits(&spec) {
            return Err(BurstError::Mismatch(format!(
                "prepared for links {:?} of {} B frames, up to {} B per chunk",
                self.links, self.frame_bytes, self.max_payload_bytes
            )));
        }
        let name = self.name.clone().expect("a prepared burst starts once");
        let prepared_home = self.outputs[0].join(&name);
        let home = self.outputs[0].join(&spec.burst_id);
        // Links on other outputs: a symbolic link under the usual name in the burst directory
        // (to where the file will be once its directory has the burst's name).
        let mut elsewhere = Vec::new();
        for (i, &link) in self.links.iter().enumerate() {
            if i % self.outputs.len() == 0 {
                elsewhere.push(None);
                continue;
            }
            let target = output_for(&self.outputs, i)
                .join(&spec.burst_id)
                .join(link_file_name(link));
            let at = prepared_home.join(link_file_name(link));
            std::os::unix::fs::symlink(&target, &at)
                .map_err(|cause| BurstError::Dir { path: at, cause })?;
            elsewhere.push(Some(target.display().to_string()));
        }
        let opened_in: Vec<(String, String)> = (0..self.links.len())
            .map(|i| {
                let out = output_for(&self.outputs, i);
                (
                    out.join(&name).display().to_string(),
                    out.join(&spec.burst_id).display().to_string(),
                )
            })
            .collect();
        // The manifest (`recording`) is written, durably, while the directory still has its
        // prepared name: the burst's directory never appears under its name without it. A unit
        // killed between the rename and a manifest written after it would leave a directory
        // its restart cannot tell from someone else's, and the trigger it had taken said
        // nowhere.
        let writers = std::mem::take(&mut self.writers);
        let recording = self.recording.take();
        let burst_id = spec.burst_id.clone();
        let directory_syncs_lost = crate::manifest::directory_syncs_lost(&spec.injected_faults);
        let writer = BurstWriter::from_writers(
            opened_in,
            (&home, &prepared_home),
            spec,
            writers,
            elsewhere,
            recording,
        )?;
        // The home output's directory last: once it has the burst's name, every file it
        // names on other outputs has its name too.
        let mut order: Vec<usize> = self.used.iter().copied().filter(|&k| k != 0).collect();
        order.extend(self.used.iter().copied().filter(|&k| k == 0));
        let mut renamed: Vec<usize> = Vec::new();
        for &k in &order {
            let (from, to) = (self.outputs[k].join(&name), self.outputs[k].join(&burst_id));
            if let Err(cause) = rename_no_replace(&from, &to) {
                // Put back what was renamed (it holds no data yet), so that dropping the
                // preparation removes all of it and no half-made burst is left behind.
                for &j in &renamed {
                    let _ = std::fs::rename(
                        self.outputs[j].join(&burst_id),
                        self.outputs[j].join(&name),
                    );
                }
                return Err(if cause.kind() == std::io::ErrorKind::AlreadyExists {
                    BurstError::Exists(to)
                } else {
                    BurstError::Dir { path: to, cause }
                });
            }
            renamed.push(k);
        }
        self.name = None;
        for &k in self.used.iter().filter(|_| !directory_syncs_lost) {
            sync_dir(&self.outputs[k]).map_err(|cause| BurstError::Dir {
                path: self.outputs[k].clone(),
                cause,
            })?;
        }
        Ok(writer)
    }
}

/// Creating a burst at once is preparing it and starting it at once; it lives here, beside the
/// preparation, so that the burst writer does not depend on it.
impl<S: Sink> BurstWriter<S> {
    /// Creates `parent/<burst_id>/`, opens a sink per link with `open_sink(link, path)`, and
    /// writes the manifest in state `recording`. (A recorder prepares this ahead of the trigger
    /// with `PreparedBurst`; this is the same, done at once.)
    pub fn create(
        parent: &Path,
        spec: BurstSpec,
        open_sink: impl FnMut(u32, &Path) -> Result<S, PersistError>,
    ) -> Result<Self, BurstError> {
        Self::create_on(&[parent.to_path_buf()], spec, open_sink)
    }

    /// As `create`, with the links spread over `outputs` (home first; see `outputs`).
    pub fn create_on(
        outputs: &[PathBuf],
        spec: BurstSpec,
        open_sink: impl FnMut(u32, &Path) -> Result<S, PersistError>,
    ) -> Result<Self, BurstError> {
        check_burst_id(&spec.burst_id)?;
        for out in outputs {
            let dir = out.join(&spec.burst_id);
            if dir.symlink_metadata().is_ok() {
                return Err(BurstError::Exists(dir));
            }
        }
        PreparedBurst::prepare_on(
            outputs,
            &spec.links,
            spec.frame.frame_bytes,
            spec.max_payload_bytes,
            open_sink,
        )?
        .start(spec)
    }
}

impl<S: Sink> Drop for PreparedBurst<S> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            // Close the sinks (unmap, close) before their files go.
            self.writers.clear();
            for &k in &self.used {
                let _ = std::fs::remove_dir_all(self.outputs[k].join(&name));
            }
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
