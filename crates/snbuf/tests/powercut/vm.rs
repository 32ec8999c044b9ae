//! The machine whose plug the trials pull: Debian's stock kernel booted by QEMU with a small
//! initramfs (busybox, the `snbuf` binary under test and the libraries and modules it needs),
//! its data disk an image served by nbdkit through its cache filter in writeback mode. That
//! filter keeps every write in a cache of its own until the guest flushes, like a drive's
//! volatile write cache: SIGKILL to nbdkit and QEMU loses exactly what was never flushed, with
//! the guest's page cache and every request in flight. (QEMU's own cache on a plain image would
//! not do: the host's page cache keeps every write QEMU received, flushed or not.)

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::common;

/// How long a host tool that builds the guest or its disk (objcopy, ldd, xz, cpio, mkfs) may
/// take.
const TOOL_DEADLINE: Duration = Duration::from_secs(120);

/// Kernel modules the guest loads, dependencies first: the disk, and the file systems.
const MODULES: &[&str] = &["virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "xfs"];

/// The guest's /init. The kernel hands `snbuf_*` parameters of its command line to it as
/// environment variables. Lines for the host start with "@@": `ready` once the data disk is
/// mounted, `status <json>` for each new state of the recorder's status file (its durable
/// watermark: every line the host has received is a promise), `exit <code>` when it is done,
/// `fail <why>` when the guest cannot run the trial. It runs `snbuf record`; with `mode=serve`,
/// `snbuf serve` and one trigger instead; with `mode=restart`, `snbuf serve` on the disk a cut
/// left, and `restarted <status json>` once its status lists the burst it recovered (or after
/// 60 s: one sealed before the cut is not recovered, so never listed).
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The host reads this script's lines on the first serial port; the kernel's log goes to the
# second (a file of the host's, read when a guest does not come up).
exec > /dev/ttyS0 2>&1
for m in $(cat /etc/modules); do insmod "/lib/modules/$m.ko" || echo "@@ fail insmod $m"; done
if [ "$snbuf_mode" = probe ]; then echo "@@ ready"; poweroff -f; fi
n=0
while [ ! -b /dev/vda ]; do
  n=$((n + 1)); [ $n -gt 400 ] && { echo "@@ fail no /dev/vda"; poweroff -f; }
  usleep 50000
done
mount -t "$snbuf_fs" /dev/vda /data || { echo "@@ fail mount $snbuf_fs"; poweroff -f; }
echo "@@ ready"
# A whole site (servers, object store, units, operator): its own script (site.rs).
[ "$snbuf_mode" = site ] && exec /bin/sh /etc/site.sh
fault=""
[ -n "$snbuf_fault" ] && fault="--inject-fault $snbuf_fault --unsafe-faults-for-tests"
if [ "$snbuf_mode" = serve ] || [ "$snbuf_mode" = restart ]; then
  /bin/snbuf serve --output /data/snbuf --socket /run/s.sock --status-file /run/status.json \
    --method "$snbuf_method" --rate-per-link "$snbuf_rate" \
    --links "$snbuf_links" --writers "$snbuf_links" --buffer 1s --pre 500ms --post 2s \
    --chunk-frames 16 --chunks-per-persist 1 > /run/serve.log 2>&1 &
  n=0
  until /bin/snbuf status --socket /run/s.sock > /dev/null 2>&1; do
    n=$((n + 1))
    [ $n -gt 600 ] && { echo "@@ fail serve did not answer"; tail -n 20 /run/serve.log | sed 's/^/@@ log /'; poweroff -f; }
    usleep 100000
  done
  if [ "$snbuf_mode" = restart ]; then
    # It recovers what it was recording when the power went in the background: until its
    # status lists the burst (60 s at most; a burst sealed before the cut is never listed).
    n=0
    until /bin/snbuf status --socket /run/s.sock --json | grep -q '"burst_id": "t"'; do
      n=$((n + 1)); [ $n -gt 600 ] && break
      usleep 100000
    done
    echo "@@ restarted $(/bin/snbuf status --socket /run/s.sock --json | tr -d '\n')"
    tail -n 20 /run/serve.log | sed 's/^/@@ log /'
    while true; do sleep 60; done
  fi
  usleep 1200000
  /bin/snbuf trigger --socket /run/s.sock --burst-id t > /run/trigger.log 2>&1 ||
    { echo "@@ fail trigger: $(cat /run/trigger.log)"; poweroff -f; }
  last=""
  while true; do
    s=$(cat /run/status.json 2>/dev/null)
    [ -n "$s" ] && [ "$s" != "$last" ] && { echo "@@ status $s"; last="$s"; }
    usleep 10000
  done
fi
/bin/snbuf record --output /data/snbuf --burst-id t --status-file /run/status.json \
  --method "$snbuf_method" --rate-per-link "$snbuf_rate" $fault \
  --links "$snbuf_links" --writers "$snbuf_links" --buffer 1s --pre 500ms --post 2s --trigger-after 1500ms \
  --chunk-frames 16 --chunks-per-persist 1 > /run/record.log 2>&1 &
pid=$!
last=""
while kill -0 $pid 2>/dev/null; do
  s=$(cat /run/status.json 2>/dev/null)
  [ -n "$s" ] && [ "$s" != "$last" ] && { echo "@@ status $s"; last="$s"; }
  usleep 10000
done
wait $pid
rc=$?
s=$(cat /run/status.json 2>/dev/null)
[ -n "$s" ] && [ "$s" != "$last" ] && echo "@@ status $s"
tail -n 20 /run/record.log | sed 's/^/@@ log /'
echo "@@ exit $rc"
while true; do sleep 60; done
"#;

/// The host programs, kernel and modules the trials need.
pub struct Tools {
    qemu: PathBuf,
    nbdkit: PathBuf,
    busybox: PathBuf,
    kernel: PathBuf,
    modules: PathBuf,
}

impl Tools {
    /// What is installed; None (the test skips, or fails under SNBUF_REQUIRE_QEMU) otherwise.
    pub fn find() -> Option<Tools> {
        let hint = "apt-get install qemu-system-x86 nbdkit busybox-static cpio linux-image-amd64";
        let tool = |p: &str| common::installed_tool([PathBuf::from(p)], "SNBUF_REQUIRE_QEMU", hint);
        let qemu = tool("/usr/bin/qemu-system-x86_64")?;
        let nbdkit = tool("/usr/bin/nbdkit")?;
        let busybox = tool("/bin/busybox")?;
        tool("/usr/bin/cpio")?;
        // A kernel whose modules are installed beside it.
        let kernel = std::fs::read_dir("/boot")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.strip_prefix("vmlinuz-").is_some_and(|v| {
                    Path::new("/lib/modules")
                        .join(v)
                        .join("modules.dep")
                        .exists()
                })
            })
            .max();
        let kernel = common::installed_tool(kernel, "SNBUF_REQUIRE_QEMU", hint)?;
        let version = kernel.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
        Some(Tools {
            qemu,
            nbdkit,
            busybox,
            kernel,
            modules: Path::new("/lib/modules").join(version),
        })
    }
}

/// The guest, built once per test process: its initramfs, and how QEMU runs it here.
pub struct Guest {
    dir: tempfile::TempDir,
    initramfs: PathBuf,
    /// "kvm" where /dev/kvm runs this guest, else "tcg" (QEMU's emulator).
    pub accel: &'static str,
    /// The file systems the guest has modules for.
    pub filesystems: Vec<&'static str>,
    machine: Machine,
}

/// The guest machine's size.
#[derive(Clone, Copy)]
pub struct Machine {
    pub memory_mib: u32,
    /// Virtual CPUs; more than one is emulated on a host thread each (multi-threaded TCG).
    pub cpus: u32,
}

/// One recorder on a small machine: what the record and serve trials need.
const RECORDER_MACHINE: Machine = Machine {
    memory_mib: 768,
    cpus: 1,
};

/// What a guest carries besides busybox, snbuf and the modules.
pub enum Extra {
    /// A host program, and where the guest finds it (its shared libraries come along).
    Program { from: PathBuf, to: &'static str },
    /// A file of the guest's, and its text.
    File { to: &'static str, text: String },
}

static GUEST: OnceLock<Guest> = OnceLock::new();

pub fn guest(tools: &Tools) -> &'static Guest {
    GUEST.get_or_init(|| Guest::build(tools, &[], RECORDER_MACHINE))
}

impl Guest {
    /// Builds an initramfs with `extras`, for a machine of size `machine`, and finds how QEMU
    /// runs it here.
    pub fn build(tools: &Tools, extras: &[Extra], machine: Machine) -> Guest {
        let dir = tempfile::tempdir().unwrap();
        let (initramfs, loaded) = build_initramfs(tools, dir.path(), extras);
        let filesystems = ["ext4", "xfs"]
            .into_iter()
            .filter(|fs| loaded.iter().any(|m| m == fs))
            .collect();
        let mut g = Guest {
            dir,
            initramfs,
            accel: "tcg",
            filesystems,
            machine,
        };
        if Path::new("/dev/kvm").exists() && probe_kvm(tools, &g) {
            g.accel = "kvm";
        }
        eprintln!("power cuts: the guest runs under {}", g.accel);
        g
    }
}

/// Whether QEMU with KVM boots the guest to its init (on some hosts it fails to set MSRs, or
/// hangs).
fn probe_kvm(tools: &Tools, g: &Guest) -> bool {
    match launch(tools, g, "kvm", None, &[("mode", "probe")]) {
        Ok(mut vm) => {
            let ready = vm
                .wait_for_line("@@ ready", Duration::from_secs(30))
                .is_ok();
            vm.cut();
            ready
        }
        Err(_) => false,
    }
}

/// Module file names to load, dependencies first, and the modules they are.
fn resolve_modules(modules: &Path) -> Vec<(PathBuf, String)> {
    let dep = std::fs::read_to_string(modules.join("modules.dep")).unwrap_or_default();
    let builtin = std::fs::read_to_string(modules.join("modules.builtin")).unwrap_or_default();
    let name_of = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split(".ko").next().unwrap_or(file).replace('-', "_")
    };
    let deps: Vec<(String, String, Vec<String>)> = dep
        .lines()
        .filter_map(|l| {
            let (m, ds) = l.split_once(':')?;
            Some((
                name_of(m),
                m.to_string(),
                ds.split_whitespace().map(str::to_string).collect(),
            ))
        })
        .collect();
    let mut order: Vec<(PathBuf, String)> = Vec::new();
    fn visit(
        path: &str,
        deps: &[(String, String, Vec<String>)],
        modules: &Path,
        order: &mut Vec<(PathBuf, String)>,
        name_of: &dyn Fn(&str) -> String,
    ) {
        let name = name_of(path);
        if order.iter().any(|(_, n)| *n == name) {
            return;
        }
        if let Some((_, _, ds)) = deps.iter().find(|(_, p, _)| p == path) {
            for d in ds.iter().rev() {
                visit(d, deps, modules, order, name_of);
            }
        }
        order.push((modules.join(path), name));
    }
    for want in MODULES {
        if builtin.lines().any(|l| name_of(l) == *want) {
            continue;
        }
        if let Some((_, path, _)) = deps.iter().find(|(n, _, _)| n == want) {
            visit(path, &deps, modules, &mut order, &name_of);
        }
    }
    order
}

/// Writes the initramfs (an uncompressed newc cpio: nothing to decompress in an emulated CPU);
/// returns it and the modules in it.
fn build_initramfs(tools: &Tools, dir: &Path, extras: &[Extra]) -> (PathBuf, Vec<String>) {
    let root = dir.join("root");
    for d in [
        "bin",
        "etc",
        "lib/modules",
        "proc",
        "sys",
        "dev",
        "run",
        "data",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(&tools.busybox, root.join("bin/busybox")).unwrap();
    let snbuf = root.join("bin/snbuf");
    // Without debug information: a smaller initramfs boots faster.
    let stripped = common::succeeds_within(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(env!("CARGO_BIN_EXE_snbuf"))
            .arg(&snbuf),
        TOOL_DEADLINE,
    );
    if !stripped {
        std::fs::copy(env!("CARGO_BIN_EXE_snbuf"), &snbuf).unwrap();
    }
    let mut programs = vec![
        PathBuf::from(env!("CARGO_BIN_EXE_snbuf")),
        tools.busybox.clone(),
    ];
    for extra in extras {
        match extra {
            Extra::Program { from, to } => {
                let to = root.join(to.trim_start_matches('/'));
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(from, &to)
                    .unwrap_or_else(|e| panic!("{} into the guest: {e}", from.display()));
                programs.push(from.clone());
            }
            Extra::File { to, text } => {
                let to = root.join(to.trim_start_matches('/'));
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(to, text).unwrap();
            }
        }
    }
    // The shared libraries the programs name (none for a static one), at the same paths.
    for binary in &programs {
        let ldd = common::output_within(Command::new("ldd").arg(binary), TOOL_DEADLINE);
        for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
            if word.starts_with('/') && Path::new(word).exists() {
                let to = root.join(word.trim_start_matches('/'));
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::copy(word, &to).unwrap();
            }
        }
    }
    let mut names = Vec::new();
    for (path, name) in resolve_modules(&tools.modules) {
        let to = root.join("lib/modules").join(format!("{name}.ko"));
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let decompress = match ext {
            "xz" => Some("xz"),
            "zst" => Some("zstd"),
            "gz" => Some("gzip"),
            _ => None,
        };
        match decompress {
            Some(tool) => {
                let out =
                    common::output_within(Command::new(tool).arg("-dc").arg(&path), TOOL_DEADLINE);
                assert!(out.status.success(), "{tool} -dc {}", path.display());
                std::fs::write(&to, out.stdout).unwrap();
            }
            None => {
                std::fs::copy(&path, &to).unwrap();
            }
        }
        names.push(name);
    }
    std::fs::write(root.join("etc/modules"), names.join("\n") + "\n").unwrap();
    std::fs::write(root.join("init"), INIT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("init"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let image = dir.join("initramfs.cpio");
    let cpio = common::output_within(
        Command::new("sh")
            .arg("-c")
            .arg("find . | cpio -o -H newc --quiet > \"$0\"")
            .arg(&image)
            .current_dir(&root),
        TOOL_DEADLINE,
    );
    assert!(cpio.status.success(), "cpio: {}", common::stderr(&cpio));
    (image, names)
}

/// A disk image with a fresh file system, served by nbdkit through its writeback cache.
pub struct Disk {
    dir: tempfile::TempDir,
    pub image: PathBuf,
    pub fs: &'static str,
    nbdkit: Option<common::KillOnDrop>,
}

impl Disk {
    /// A 320 MiB sparse image (mkfs.xfs's smallest is 300 MiB), formatted on the host.
    pub fn new(fs: &'static str) -> Disk {
        Disk::of_size(fs, 320 << 20)
    }

    /// A sparse image of `bytes`, formatted on the host.
    pub fn of_size(fs: &'static str, bytes: u64) -> Disk {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let image = dir.path().join("disk.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let mkfs = common::output_within(
            Command::new(format!("mkfs.{fs}"))
                .args(if fs == "xfs" {
                    &["-q", "-f"][..]
                } else {
                    &["-q", "-F"][..]
                })
                .arg(&image),
            TOOL_DEADLINE,
        );
        assert!(
            mkfs.status.success(),
            "mkfs.{fs}: {}",
            common::stderr(&mkfs)
        );
        Disk {
            dir,
            image,
            fs,
            nbdkit: None,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("nbd.sock")
    }

    fn serve(&mut self, tools: &Tools) {
        // A disk served again after a cut: its last server's socket is left behind.
        let _ = std::fs::remove_file(self.socket());
        let child = Command::new(&tools.nbdkit)
            .args(["-f", "--exit-with-parent", "-U"])
            .arg(self.socket())
            .args(["--filter=cache", "file"])
            .arg(&self.image)
            .arg("cache=writeback")
            .env("TMPDIR", self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nbdkit starts");
        self.nbdkit = Some(common::KillOnDrop(child));
        common::wait_for_socket(&self.socket());
    }
}

/// A running guest: QEMU and the disk's nbdkit, and the console's lines as they arrive.
pub struct Vm {
    qemu: common::KillOnDrop,
    disk: Option<Disk>,
    lines: Receiver<(Instant, String)>,
    /// Every console line so far, for a failure's message.
    pub console: Vec<String>,
    /// Where QEMU writes what the guest's kernel logs.
    kernel_log: PathBuf,
}

impl Drop for Vm {
    fn drop(&mut self) {
        // (Kept where a test fails, for whoever looks: its message had its last lines.)
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.kernel_log);
        }
    }
}

/// Boots so far, each naming its kernel log.
static BOOTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long a guest may take to mount its disk and say so, emulated on a loaded host.
pub const READY_DEADLINE: Duration = Duration::from_secs(180);
/// Boots of one disk that may stay silent before the trial fails.
const BOOTS_FOR_READY: u32 = 3;

impl Guest {
    /// Boots the guest on `disk` with the init parameters `params` (`snbuf_<key>=<value>`).
    pub fn boot(&self, tools: &Tools, disk: Disk, params: &[(&str, &str)]) -> std::io::Result<Vm> {
        launch(tools, self, self.accel, Some(disk), params)
    }

    /// `boot`, once the guest has its disk mounted ("@@ ready"). A guest that says nothing
    /// within `READY_DEADLINE` (its kernel stuck before our init ran: seen once in CI, under
    /// emulation on a loaded host) has its plug pulled and boots again: no snbuf code ran, and
    /// a cut while the kernel mounts is one more cut. Its kernel's log is shown. Panics where
    /// every boot stays silent, or the guest says it cannot run the trial.
    pub fn boot_ready(&self, tools: &Tools, disk: Disk, params: &[(&str, &str)]) -> Vm {
        let mut disk = Some(disk);
        for attempt in 1..=BOOTS_FOR_READY {
            let mut vm = self
                .boot(tools, disk.take().expect("the disk"), params)
                .expect("QEMU starts");
            match vm.wait_for_line("@@ ready", READY_DEADLINE) {
                Ok(_) => return vm,
                Err(e) if e.starts_with("@@ fail") || attempt == BOOTS_FOR_READY => panic!(
                    "the guest {params:?} did not come up ({attempt} boots; QEMU {}): {e}\n{}",
                    if vm.alive() { "running" } else { "gone" },
                    vm.tails()
                ),
                Err(e) => {
                    eprintln!(
                        "power cuts: boot {attempt} of {params:?} did not come up ({e}; QEMU \
                         {}); cut and booted again. Its kernel said:\n{}",
                        if vm.alive() { "running" } else { "gone" },
                        vm.kernel_tail()
                    );
                    disk = vm.cut().0;
                }
            }
        }
        unreachable!("the last boot returns or panics")
    }
}

fn launch(
    tools: &Tools,
    guest: &Guest,
    accel: &str,
    mut disk: Option<Disk>,
    params: &[(&str, &str)],
) -> std::io::Result<Vm> {
    {
        // (A file of its own per boot, in the guest's directory, which outlives every boot.)
        let kernel_log = guest.dir.path().join(format!(
            "kernel-{}.log",
            BOOTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let mut append = String::from("console=ttyS1 loglevel=6 panic=-1");
        for (k, v) in params {
            append += &format!(" snbuf_{k}={v}");
        }
        let mut cmd = Command::new(&tools.qemu);
        let Machine { memory_mib, cpus } = guest.machine;
        let accel = match accel {
            "tcg" if cpus > 1 => "tcg,thread=multi",
            a => a,
        };
        cmd.args(["-accel", accel])
            .args(["-cpu", if accel == "kvm" { "host" } else { "max" }])
            .args(["-m", &memory_mib.to_string(), "-smp", &cpus.to_string()])
            .args(["-display", "none", "-monitor", "none"])
            .args(["-serial", "stdio", "-serial"])
            .arg(format!("file:{}", kernel_log.display()))
            .arg("-no-reboot")
            .arg("-kernel")
            .arg(&tools.kernel)
            .arg("-initrd")
            .arg(&guest.initramfs)
            .args(["-append", &append]);
        if let Some(d) = disk.as_mut() {
            d.serve(tools);
            // write-cache=on: the guest sees a volatile cache and sends flushes (with it off,
            // every write would carry FUA and nothing would stay volatile).
            cmd.arg("-blockdev").arg(format!(
                "driver=nbd,node-name=data,server.type=unix,server.path={}",
                d.socket().display()
            ));
            cmd.args(["-device", "virtio-blk-pci,drive=data,write-cache=on"]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        Ok(Vm {
            qemu: common::KillOnDrop(child),
            disk,
            lines,
            console: Vec::new(),
            kernel_log,
        })
    }
}

impl Vm {
    /// The next console line, and when the host received it; None after `timeout`, or when
    /// the guest is gone.
    pub fn next_line(&mut self, timeout: Duration) -> Option<(Instant, String)> {
        let l = self.lines.recv_timeout(timeout).ok()?;
        self.console.push(l.1.clone());
        Some(l)
    }

    /// The last lines the guest printed and its kernel logged, for a failure's message.
    pub fn tails(&self) -> String {
        format!(
            "{}\nkernel:\n{}",
            super::tail(&self.console),
            self.kernel_tail()
        )
    }

    /// The last lines the guest's kernel logged, for a failure's message.
    pub fn kernel_tail(&self) -> String {
        let log = std::fs::read(&self.kernel_log).unwrap_or_default();
        let lines: Vec<String> = String::from_utf8_lossy(&log)
            .lines()
            .map(str::to_string)
            .collect();
        super::tail(&lines)
    }

    /// Whether QEMU still runs (a guest that powered off, or crashed, has nothing more to say).
    pub fn alive(&mut self) -> bool {
        matches!(self.qemu.0.try_wait(), Ok(None))
    }

    /// Waits (at most `timeout`) for a console line starting with `prefix`.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> Result<String, String> {
        let until = Instant::now() + timeout;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.next_line(left) {
                Some((_, l)) if l.starts_with(prefix) => return Ok(l),
                Some((_, l)) if l.starts_with("@@ fail") => return Err(l),
                Some(_) => {}
                None => break,
            }
        }
        Err(format!("no '{prefix}' within {timeout:?}"))
    }

    /// Pulls the plug: SIGKILL to nbdkit (with every write the guest did not flush) and to
    /// QEMU (with the guest's page cache and requests in flight), together. Returns the disk
    /// and the moment of the cut; console lines received before it are still to be read.
    pub fn cut(&mut self) -> (Option<Disk>, Instant) {
        let at = Instant::now();
        let mut disk = self.disk.take();
        if let Some(d) = disk.as_mut() {
            drop(d.nbdkit.take());
        }
        let _ = self.qemu.0.kill();
        let _ = self.qemu.0.wait();
        (disk, at)
    }
}
