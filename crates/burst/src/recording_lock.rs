//! Which bursts are being recorded right now: their recorder holds a lock (`flock`) on the
//! burst's home directory from the moment it is made (under its preparation's hidden name: the
//! lock follows the rename) until its manifest is sealed. The kernel drops the lock when that
//! process dies, however it dies, so a burst still `recording` whose lock is free was
//! interrupted: a unit starting on the output may recover it, and `ls` says so.

use std::fs::File;
use std::path::Path;

/// Locks `dir` for as long as the returned handle lives, if no one else holds it. None where
/// the file system has no locks (a burst records all the same; it is then never taken for
/// interrupted, see `being_recorded`), or when another process holds it: a recovery takes it
/// too, so that two processes never recover one burst at once.
pub fn hold(dir: &Path) -> Option<File> {
    let f = File::open(dir).ok()?;
    f.try_lock().ok()?;
    Some(f)
}

/// Whether a live recorder may hold `dir`. Anything but a lock this process could take says
/// yes: a file system without locks, or an error, must never let a live burst be recovered.
pub fn being_recorded(dir: &Path) -> bool {
    match File::open(dir) {
        Ok(f) => f.try_lock().is_err(),
        // Gone: nothing to recover. Unreadable: not ours to judge.
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}
