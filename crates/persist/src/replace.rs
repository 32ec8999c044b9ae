//! Replacing a small file whole (a manifest, a status report, a journal): it is written beside
//! the old one and renamed over it, so a reader sees the old version or the new one, never half
//! of one. How durable the replacement is, each caller says:
//!
//! - `Durable`: the new version survives a power cut once the call returns (the file is
//!   fsync'ed before the rename, the directory after it). A burst's manifest needs this: it
//!   states what the data holds.
//! - `Atomic`: whole versions only; after a power cut the old version (or none) may be back.
//!   Enough for what reports durability without providing it (the status file) and for what
//!   only repeats work when lost (the export journal).
//! - `DurableButDirectoryLost`: the injected fault `lost-dir-sync`, for the one burst recorded
//!   under it (a test's, which the power-cut trials must catch): the file is fsync'ed, its
//!   directory is not, and the call says it worked. Nothing else in the process is touched.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplaceDurability {
    Atomic,
    Durable,
    DurableButDirectoryLost,
}

/// Replaces `path` with `contents` (see the module comment). On error the old version, if any,
/// is still in place; the temporary file `.<name>.tmp` beside it may remain.
pub fn replace_file(path: &Path, contents: &[u8], durability: ReplaceDurability) -> io::Result<()> {
    let tmp = temp_path(path)?;
    debug_assert_ne!(
        tmp, path,
        "the new version is written beside the old, not over it"
    );
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(contents)?;
    if durability != ReplaceDurability::Atomic {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, path)?;
    if durability == ReplaceDurability::Durable {
        // The rename is only durable once the directory is.
        sync_dir(parent_of(path))?;
    }
    Ok(())
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `.<name>.tmp` beside `path`: hidden, and in the same directory so the rename is atomic.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(".tmp");
    let tmp = parent_of(path).join(tmp);
    debug_assert_eq!(
        tmp.parent(),
        Some(parent_of(path)),
        "beside the file it replaces, so the rename is atomic"
    );
    Ok(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_file_remains() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        for d in [ReplaceDurability::Atomic, ReplaceDurability::Durable] {
            replace_file(&p, b"one", d).unwrap();
            replace_file(&p, b"two", d).unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"two");
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        }
        assert!(replace_file(Path::new("/"), b"x", ReplaceDurability::Atomic).is_err());
    }
}
