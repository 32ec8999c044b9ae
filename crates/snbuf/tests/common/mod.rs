//! What every test of the `snbuf` binary needs: run it, and check a refusal the way a user
//! meets one (the exit code, exactly one line naming the error, no panic).
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Runs the binary under test with `args`.
pub fn snbuf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(args)
        .output()
        .expect("the binary runs")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code `code`, exactly one line naming the error, which mentions `needle`, and no panic.
pub fn assert_refused(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let error_lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(error_lines.len(), 1, "one error line: {err}");
    assert!(error_lines[0].contains(needle), "'{needle}' not in: {err}");
}

/// A tmpfs mounted for one test (root only); unmounted on drop.
pub struct Mount(tempfile::TempDir);

impl Mount {
    pub fn tmpfs(options: &str) -> Option<Mount> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(Mount(dir))
    }
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A child process (a server) killed and reaped when the test ends, however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until a server accepts connections on the Unix socket `socket` (at most 20 s).
pub fn wait_for_socket(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "no server came up on {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The first of `candidates` that exists. When none does, the test skips and says so (`hint`:
/// how to install it), unless `require_env` is set, as in CI: then it fails.
pub fn installed_tool(
    candidates: impl IntoIterator<Item = std::path::PathBuf>,
    require_env: &str,
    hint: &str,
) -> Option<std::path::PathBuf> {
    let found = candidates.into_iter().find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os(require_env).is_none(),
            "{require_env} is set but it is not installed: {hint}"
        );
        eprintln!("skip: not installed ({hint})");
    }
    found
}
