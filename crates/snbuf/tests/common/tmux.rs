//! A view tried as a person would: a full-screen command run in a real terminal (a tmux server
//! of the test's own), its screen read back with `capture-pane`, keys sent to it. Every tmux
//! call and every wait for the screen has a deadline.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Where tmux is; None (the test skips) when it is not installed, unless SNBUF_REQUIRE_TMUX is set.
pub fn installed() -> Option<PathBuf> {
    super::installed_tool(
        [PathBuf::from("/usr/bin/tmux")],
        "SNBUF_REQUIRE_TMUX",
        "apt-get install tmux",
    )
}

/// A tmux server of our own running one session, "view"; killed on drop.
pub struct Tmux {
    tmux: PathBuf,
    name: String,
}

impl Tmux {
    /// Starts `command_line` in a 140 x 40 terminal of a tmux server named after `what` and
    /// this process.
    pub fn start(tmux: PathBuf, what: &str, command_line: &str) -> Tmux {
        let t = Tmux {
            tmux,
            name: format!("snbuf-test-{what}-{}", std::process::id()),
        };
        let o = t.cmd(&[
            "new-session",
            "-d",
            "-s",
            "view",
            "-x",
            "140",
            "-y",
            "40",
            command_line,
        ]);
        assert!(o.status.success(), "{}", super::stderr(&o));
        t
    }

    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        let mut c = Command::new(&self.tmux);
        c.args(["-L", &self.name, "-f", "/dev/null"]).args(args);
        super::output_within(c, Duration::from_secs(20))
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "view"]).stdout)
            .into_owned()
    }

    /// Waits (at most `within`) for the screen to satisfy `ok`; returns it.
    pub fn wait_for(&self, within: Duration, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + within;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < until,
                "no {what} within {within:?}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Presses q and waits (at most 10 s) for the view to end.
    pub fn quit_with_q(&self) {
        self.cmd(&["send-keys", "-t", "view", "q"]);
        let until = Instant::now() + Duration::from_secs(10);
        while self.cmd(&["has-session", "-t", "view"]).status.success() {
            assert!(Instant::now() < until, "q did not quit:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}
