//! What every test that runs another program needs, in one place for all the workspace's
//! tests: nothing waits forever. A command runs with a deadline and is killed past it (the test
//! fails, with what it printed, instead of stalling CI); a server started by a test is killed
//! and reaped however the test ends; a tmpfs mounted for a test is unmounted; and a test that
//! cannot run here skips, saying why, unless CI requires what it needs.

use std::borrow::BorrowMut;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a mount, umount or other small system command may take.
pub const SYSTEM_COMMAND_DEADLINE: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end and returns what it printed, as `Command::output` does (stdin
/// empty), but kills it and fails the test if it runs longer than `deadline`. A command that
/// cannot start fails the test too.
pub fn output_within(cmd: impl BorrowMut<Command>, deadline: Duration) -> Output {
    try_output_within(cmd, deadline).unwrap_or_else(|(cmd, e)| panic!("{cmd} does not start: {e}"))
}

/// `output_within`, with a command that cannot start (not installed) given back as an error
/// naming it, for tests that skip without it.
pub fn try_output_within(
    mut cmd: impl BorrowMut<Command>,
    deadline: Duration,
) -> Result<Output, (String, std::io::Error)> {
    use std::io::Read;
    let cmd = cmd.borrow_mut();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| (format!("{cmd:?}"), e))?;
    let drain = |mut r: Box<dyn Read + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        rx
    };
    // What a stream printed: a grandchild that kept the pipe open must not make this wait.
    let printed = |rx: &std::sync::mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(PIPE_CLOSE_GRACE).unwrap_or_default()
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));
    let until = Instant::now() + deadline;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the command") {
            break s;
        }
        if Instant::now() >= until {
            // SIGKILL cannot be refused: the wait after it is bounded.
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} still ran after {deadline:?}; it printed:\n{}\n{}",
                String::from_utf8_lossy(&printed(&out)),
                String::from_utf8_lossy(&printed(&err))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // The command ended: its output is whole once the pipes close. A process it left behind
    // that holds them open would make the output look empty, and a test that checks what was
    // not printed pass for nothing: that fails the test, loudly.
    let whole = |rx: &std::sync::mpsc::Receiver<Vec<u8>>, which: &str| {
        rx.recv_timeout(PIPE_CLOSE_GRACE).unwrap_or_else(|_| {
            panic!(
                "{cmd:?} ended ({status}), but a process it started still holds its {which} \
                 open {PIPE_CLOSE_GRACE:?} later: its output cannot be read whole"
            )
        })
    };
    Ok(Output {
        status,
        stdout: whole(&out, "stdout"),
        stderr: whole(&err, "stderr"),
    })
}

/// How long after a command ended its output pipes may stay open.
const PIPE_CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Whether `cmd` ran and succeeded within `deadline` (false when it cannot start); a command
/// still running then fails the test.
pub fn succeeds_within(cmd: impl BorrowMut<Command>, deadline: Duration) -> bool {
    try_output_within(cmd, deadline).is_ok_and(|o| o.status.success())
}

/// A child process (a server, a sender) killed and reaped when the test ends, however it ends:
/// SIGKILL cannot be refused, so the wait after it is bounded.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// Waits at most `deadline` for the child to end by itself; kills it past that. Returns
    /// whether it ended by itself, and how.
    pub fn wait_within(&mut self, deadline: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + deadline;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.0.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        None
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tmpfs mounted for one test (root only); unmounted on drop.
pub struct Mount(tempfile::TempDir);

impl Mount {
    /// A tmpfs mounted with `options` ("size=16M", "ro,size=16M"), or None where this process
    /// cannot mount one.
    pub fn tmpfs(options: &str) -> Option<Mount> {
        let dir = tempfile::tempdir().ok()?;
        let mut c = Command::new("mount");
        c.args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir.path());
        succeeds_within(c, SYSTEM_COMMAND_DEADLINE).then_some(Mount(dir))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let mut c = Command::new("umount");
        c.arg(self.0.path());
        let _ = try_output_within(c, SYSTEM_COMMAND_DEADLINE);
    }
}

/// A test that cannot run here skips and says why, unless `require_env` is set, as in CI: then
/// it fails, so that a prerequisite CI lost shows red, not as a silent pass.
pub fn skip_unless_required(require_env: &str, why: &str) {
    assert!(
        std::env::var_os(require_env).is_none(),
        "{require_env} is set but {why}"
    );
    eprintln!("skip: {why}");
}

/// Whether a prerequisite `probe` found is there (`Ok`); when it is not, the test skips it,
/// saying why, or fails under `require_env` (`skip_unless_required`). For `what` is missing:
/// "io_uring", with `snbuf_persist::backends::uring::available()` as the probe.
pub fn available_or_skip<E: std::fmt::Display>(
    require_env: &str,
    what: &str,
    probe: Result<(), E>,
) -> bool {
    match probe {
        Ok(()) => true,
        Err(why) => {
            skip_unless_required(require_env, &format!("{what} is not available here: {why}"));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_past_its_deadline_is_killed_and_fails_the_test() {
        let mut c = Command::new("sleep");
        c.arg("30");
        let start = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            output_within(c, Duration::from_millis(200))
        }));
        assert!(r.is_err(), "a hang fails");
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "and is not waited out"
        );
        let mut c = Command::new("sh");
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        let o = output_within(c, Duration::from_secs(20));
        assert_eq!(
            (o.status.code(), &o.stdout[..], &o.stderr[..]),
            (Some(3), &b"out\n"[..], &b"err\n"[..])
        );
        assert!(!succeeds_within(
            Command::new("/nonexistent/program"),
            Duration::from_secs(1)
        ));
    }

    #[test]
    fn a_command_that_leaves_a_process_holding_its_output_fails_the_test() {
        // The shell ends at once; the sleep it started keeps stdout open: what the shell
        // printed cannot be known whole, so no test may read it as empty.
        let mut c = Command::new("sh");
        c.args(["-c", "echo printed; sleep 8 & exit 0"]);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            output_within(c, Duration::from_secs(20))
        }));
        let why = r.expect_err("fails loudly");
        let why = why.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(why.contains("still holds its stdout open"), "{why}");
    }

    #[test]
    fn a_child_that_does_not_end_by_itself_is_killed_at_the_deadline() {
        let mut k = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
        assert_eq!(k.wait_within(Duration::from_millis(100)), None);
        let mut k = KillOnDrop(Command::new("true").spawn().unwrap());
        assert!(k
            .wait_within(Duration::from_secs(20))
            .is_some_and(|s| s.success()));
    }
}
