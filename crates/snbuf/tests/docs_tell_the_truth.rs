//! The docs against the program: every path they cite exists, FORMAT.md's manifest has the
//! fields of a burst recorded now, METRICS.md lists what a unit serves and serves what it lists,
//! and README.md's example commands run (shortened where they would take minutes), with their
//! ticks taken from a live burst.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{output_within, snbuf, wait_for_socket, KillOnDrop, COMMAND_DEADLINE};
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The project's prose: README, the top-level reports, docs/ and deploy/.
fn docs() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [repo(), repo().join("docs"), repo().join("deploy")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 8, "found the docs: {files:?}");
    files
}

/// Where the prose states a figure from a kept result and names the commit it describes
/// ("`bench/results/SUITE/FILE.json`, commit HASH"), that file exists and was kept at that
/// commit: a figure cannot outlive the run it came from unnoticed.
#[test]
fn every_kept_result_the_docs_date_by_commit_is_of_that_commit() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (i, _) in text.match_indices("bench/results/") {
            let rest = &text[i..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || "/_.-".contains(*c))
                .collect();
            let Some(after) = rest[path.len()..]
                .trim_start_matches('`')
                .strip_prefix(", commit ")
            else {
                continue;
            };
            let named: String = after.chars().take_while(char::is_ascii_hexdigit).collect();
            let kept: Value =
                serde_json::from_str(&std::fs::read_to_string(repo().join(&path)).unwrap())
                    .unwrap();
            let commit = kept["machine"]["git_commit"].as_str().unwrap_or("");
            checked += 1;
            if named.len() < 7 || !commit.starts_with(&named[..7]) {
                wrong.push(format!(
                    "{}: {path} is named as of commit {named}, and was kept at {commit}",
                    doc.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(checked >= 1, "the docs date kept results by commit");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_path_the_docs_cite_exists() {
    let roots = [
        "crates/", "bench/", "deploy/", "docs/", "fuzz/", "python/", ".ci/",
    ];
    let mut missing = Vec::new();
    let mut cited = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (i, _) in text.match_indices(|c: char| c.is_ascii_lowercase() || c == '.') {
            let rest = &text[i..];
            let Some(root) = roots.iter().find(|r| rest.starts_with(**r)) else {
                continue;
            };
            // Only a path that starts a word: not `x/crates/...`.
            let before = text[..i].chars().last().unwrap_or(' ');
            if before.is_alphanumeric() || "/-_.".contains(before) {
                continue;
            }
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || "/_.-<>*".contains(*c))
                .collect();
            let path = path.trim_end_matches(['.', ',', ':']);
            // Templates (`<date>-<host>.json`, `*.json`) name no one file.
            if path.contains(['<', '*']) || path.len() <= root.len() {
                continue;
            }
            cited += 1;
            if !repo().join(path).exists() {
                missing.push(format!(
                    "{}: {path}",
                    doc.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(cited > 50, "the docs cite paths ({cited} found)");
    assert!(missing.is_empty(), "cited and not there: {missing:#?}");
}

/// Every key path of a JSON value (`links[].identity.det_id`), arrays taken by their elements.
fn shape(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                out.insert(p.clone());
                shape(v, &p, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                shape(item, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_manifest_in_format_md_has_exactly_the_fields_of_a_burst_recorded_now() {
    let text = std::fs::read_to_string(repo().join("docs/FORMAT.md")).unwrap();
    let section = &text[text.find("## Manifest (`manifest.json`)").unwrap()..];
    let start = section.find("```json\n").unwrap() + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    let documented: Value = serde_json::from_str(&section[start..end]).unwrap();

    // The command FORMAT.md says made it, shortened.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let command = format!(
        "record --frame wibeth --links 1 --rate-per-link 2MB/s --buffer 1s --pre 300ms \
         --post 300ms --trigger-after 500ms --run 1234 --unit apa1 --method direct \
         --burst-id b --output {}",
        out.display()
    );
    let o = snbuf(&command.split_whitespace().collect::<Vec<_>>());
    assert!(o.status.success(), "{}", common::stderr(&o));
    let real: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("b/manifest.json")).unwrap())
            .unwrap();
    let (mut want, mut got) = (BTreeSet::new(), BTreeSet::new());
    shape(&documented, "", &mut want);
    shape(&real, "", &mut got);
    assert_eq!(
        want, got,
        "FORMAT.md's manifest and a real one differ in their fields"
    );
    for key in [
        "frame_type",
        "frame_bytes",
        "ticks_per_frame",
        "clock_hz",
        "frame_step_ticks",
    ] {
        assert_eq!(documented["frame"][key], real["frame"][key], "frame.{key}");
    }
    assert_eq!(documented["run_number"], real["run_number"]);
    assert_eq!(documented["unit"], real["unit"]);
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn metrics_md_lists_every_family_a_unit_serves_and_nothing_else() {
    let text = std::fs::read_to_string(repo().join("docs/METRICS.md")).unwrap();
    let documented: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("| `snbuf_"))
        .map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            format!("snbuf_{name}")
        })
        .collect();
    assert!(documented.len() > 20, "{documented:?}");

    // A unit with every family on: network ingest and an export destination.
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_udp_port().to_string();
    let source = format!("udp://127.0.0.1:{port}");
    let export = format!("file://{}", dir.path().join("exported").display());
    let options = format!(
        "--source {source} --frame wibeth --links 1 --rate-per-link 2MB/s --buffer 1s \
         --pre 500ms --export-to {export} --metrics 127.0.0.1:0"
    );
    let (mut cmd, _out, socket) =
        common::serve_command(dir.path(), &options.split_whitespace().collect::<Vec<_>>());
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _server = KillOnDrop(child);
    let addr = common::metrics_address(stderr);
    wait_for_socket(&socket);
    let body = http_get(&addr, "/metrics");
    let served: BTreeSet<String> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served, not in METRICS.md: {undocumented:?}; in METRICS.md, not served: {unserved:?}"
    );
}

/// What this test does with one of README.md's commands.
enum Step {
    /// Run it (with these options' values replaced, or added), expecting this exit code.
    Run(&'static [(&'static str, &'static str)], i32),
    /// Start it in the background, the same way, and wait for its control socket.
    Start(&'static [(&'static str, &'static str)]),
    /// Not run here, and why (what runs it instead).
    Skip(&'static str),
}

/// A small, quick unit: what "shortened" means for `record` and `serve`. The unit's buffer is
/// long, so that a trigger at ticks taken from its last burst still finds them on a slow machine.
const SMALL: &[(&str, &str)] = &[
    ("--links", "2"),
    ("--rate-per-link", "5MB/s"),
    ("--buffer", "6s"),
    ("--pre", "300ms"),
    ("--post", "300ms"),
];
const SMALL_RECORD: &[(&str, &str)] = &[
    ("--links", "2"),
    ("--rate-per-link", "5MB/s"),
    ("--buffer", "2s"),
    ("--pre", "300ms"),
    ("--post", "300ms"),
    ("--trigger-after", "500ms"),
];

/// As `SMALL_RECORD`, with enough chunks that link 1 surely reaches its third persist however
/// the writers batch them (up to 8 chunks each when they fall behind).
const LONGER_RECORD: &[(&str, &str)] = &[
    ("--links", "2"),
    ("--rate-per-link", "10MB/s"),
    ("--buffer", "2s"),
    ("--pre", "300ms"),
    ("--post", "3s"),
    ("--trigger-after", "500ms"),
];

/// Every `snbuf` command in README.md's examples, in the README's order, and its step. A
/// command added to (or changed in) the README and not here fails the test.
const README: &[(&str, Step)] = &[
    ("snbuf record", Step::Run(SMALL_RECORD, 0)),
    ("snbuf record --links 4 --rate-per-link 200MB/s --pre 1s --post 5s --method direct --json summary.json", Step::Run(SMALL_RECORD, 0)),
    ("snbuf record --profile dune --output /mnt/pmem0", Step::Skip("100 s at 9.3 GB/s: the profile's values are checked by the unit crate's config tests")),
    ("snbuf record --output /mnt/nvme0 --output /mnt/nvme1", Step::Run(SMALL_RECORD, 0)),
    ("snbuf serve --links 4 &", Step::Start(SMALL)),
    ("snbuf trigger --pre 2s --post 5s --wait", Step::Run(&[("--pre", "200ms"), ("--post", "300ms")], 0)),
    ("snbuf trigger --cancel burst-0003 --wait", Step::Skip("no burst in progress here: tests/hostile_triggers.rs cancels one")),
    ("snbuf trigger --at \"$TICKS\"", Step::Run(&[], 0)),
    ("snbuf status", Step::Run(&[], 0)),
    ("snbuf serve --links 4 --metrics 127.0.0.1:9464 &", Step::Skip("a second unit on the same output: tests/metrics_cli.rs serves metrics")),
    ("snbuf serve --source udp://127.0.0.1:5000 --frame wibeth --links 4 --run 1234 &", Step::Skip("network: tests/real_data.rs and detector_time.rs")),
    ("snbuf emit --to udp://127.0.0.1:5000 --links 4 --frame wibeth --digest &", Step::Skip("network: tests/real_data.rs")),
    ("snbuf trigger --pre 1s --post 2s --wait", Step::Skip("the trigger of the network unit above")),
    ("snbuf emit --to udp://10.0.0.2:5000 --links 2 --frame tdeeth --streams 8,9 --duration 30s", Step::Skip("another host")),
    ("snbuf serve --source udp://127.0.0.1:5000 --frame wibeth --links 1 &", Step::Skip("network: tests/detector_time.rs")),
    ("snbuf emit --to udp://127.0.0.1:5000 --frame wibeth --clock-offset -1d --duration 60s &", Step::Skip("network: tests/detector_time.rs")),
    ("snbuf trigger --pre 1s --post 1s --wait", Step::Skip("the trigger of the network unit above")),
    ("snbuf status", Step::Skip("the status of the network unit above")),
    ("snbuf record --frame wibeth --links 2 --replay run1234_0.bin", Step::Skip("needs a DUNE recording: tests/offline.rs replays an extracted one")),
    ("snbuf emit --to udp://127.0.0.1:5000 --frame wibeth --replay 0.bin --replay 1.bin", Step::Skip("network: tests/real_data.rs")),
    ("snbuf show snbuf-data/20261121T231000Z-0001 --out snb-page", Step::Run(&[], 0)),
    ("snbuf inspect snbuf-data/20261121T231000Z-0001 --link 0 --chunk 3 --frames", Step::Run(&[("--chunk", "0")], 0)),
    ("snbuf extract snbuf-data/20261121T231000Z-0001 --link 0 --out part.bin --from \"$FROM\" --to \"$TO\"", Step::Run(&[], 0)),
    ("snbuf convert snbuf-data/20261121T231000Z-0001 --to dune-hdf5 converted/ --slice 1s --json c.json", Step::Skip("needs --features hdf5: tests/offline.rs")),
    ("snbuf convert snbuf-data/20261121T231000Z-0001 --to dune-hdf5 smaller/ --filter blosc-zstd", Step::Skip("needs --features hdf5: tests/offline.rs")),
    ("snbuf status --watch", Step::Run(&[], 0)),
    ("snbuf fleet status --watch", Step::Skip("NATS: tests/fleet_nats.rs")),
    ("snbuf ls", Step::Run(&[], 0)),
    ("snbuf completions bash > /etc/bash_completion.d/snbuf", Step::Skip("writes to /etc: tests/ls_and_manuals.rs")),
    ("snbuf man /usr/local/share/man/man1", Step::Skip("writes to /usr: tests/ls_and_manuals.rs")),
    ("snbuf serve --nats --unit $u --links 4 --output data/$u --socket data/$u.sock &", Step::Skip("NATS: tests/fleet_nats.rs")),
    ("snbuf trigger --nats --pre 2s --post 3s", Step::Skip("NATS: tests/fleet_nats.rs")),
    ("snbuf fleet status", Step::Skip("NATS: tests/fleet_nats.rs")),
    ("snbuf fleet events", Step::Skip("NATS: tests/fleet_nats.rs")),
    ("snbuf serve --nats $NATS --unit unit-1 --output data/unit-1 --socket data/unit-1.sock &", Step::Skip("a NATS cluster: tests/fleet_faults.rs")),
    ("snbuf trigger --nats $NATS", Step::Skip("a NATS cluster: tests/fleet_faults.rs")),
    ("snbuf export data/unit-1/burst-0001 --to s3://dune-sn/unit-1 --rate 100MB/s", Step::Skip("S3: tests/export_cli.rs against Garage")),
    ("snbuf serve --nats --unit unit-1 --export-to s3://dune-sn/unit-1 --export-rate 100MB/s --metrics 127.0.0.1:9464", Step::Skip("NATS and S3: tests/export_cli.rs")),
    ("snbuf export data/unit-1/burst-0001 --to file:///archive --codec frames", Step::Skip("writes to /archive: tests/export_coded.rs exports coded and reads the copy")),
    ("snbuf verify /archive/burst-0001", Step::Skip("the copy above: tests/export_coded.rs verifies one")),
    ("snbuf serve --config unit.toml", Step::Skip("the config file: config_file_tests.rs parses every key")),
    ("snbuf record --status-file status.json", Step::Run(SMALL_RECORD, 0)),
    ("snbuf record --links 3 --inject-fault persist-eio:link=1,after=2", Step::Run(LONGER_RECORD, 1)),
    ("snbuf record --links 3 --inject-fault slow:rate=5MB/s", Step::Run(SMALL_RECORD, 0)),
    ("snbuf plan --input-rate 10GB/s --time 100s --output-rate 7GiB/s", Step::Run(&[], 0)),
    ("snbuf plan --input-rate 10GB/s --time 100s --bench results.json --method nt --block-size 5568", Step::Skip("needs a bench result: tests/paper_report.rs")),
    ("snbuf methods --target /mnt/pmem0", Step::Run(&[], 0)),
    ("snbuf bench write --target /mnt/pmem0 --method nt,clwb,clflushopt --block-size 256,4KiB,5568,1MiB --threads 1,2,4,8", Step::Skip("minutes: tests/cli.rs runs bench write")),
    ("snbuf bench write --target /var/tmp --method direct,uring --block-size 4KiB,1MiB --persist-every end", Step::Skip("minutes: tests/cli.rs")),
    ("snbuf bench write --target /var/tmp --method direct,uring --block-size 4KiB,1MiB", Step::Skip("minutes: tests/cli.rs")),
    ("snbuf bench read --target /var/tmp --method direct,uring,buffered --pattern rand --block-size 4KiB", Step::Skip("minutes: tests/cli.rs")),
    ("snbuf bench write --target /mnt/pmem0 --target /mnt/pmem1 --threads 2 --page-size 2MiB --cpus 0-1 \\", Step::Skip("minutes, two devices: tests/cli.rs")),
    ("snbuf bench latency --target /mnt/pmem0", Step::Skip("minutes: tests/paper_report.rs")),
    ("snbuf bench join --table-on target --target /mnt/pmem0", Step::Skip("minutes: tests/paper_report.rs")),
    ("snbuf bench kernels --target /mnt/pmem0", Step::Skip("minutes: tests/paper_report.rs")),
    ("snbuf bench app --target /mnt/pmem0 --method nt,pmdk", Step::Skip("needs --features pmdk: tests/paper_report.rs")),
    ("snbuf bench checksum", Step::Skip("minutes: tests/paper_report.rs")),
    ("snbuf bench codec", Step::Skip("minutes: tests/cli.rs runs a short one")),
    ("snbuf bench paper --target /mnt/pmem0 --second-target /var/tmp --out results", Step::Skip("minutes: tests/paper_report.rs runs --quick")),
    ("snbuf report results --out report", Step::Skip("tests/paper_report.rs")),
    ("snbuf verify snbuf-data/20261121T231000Z-0001", Step::Run(&[], 0)),
    ("snbuf verify snbuf-data/20261121T231000Z-0001 --json", Step::Run(&[], 0)),
    ("snbuf recover snbuf-data/20261121T231000Z-0001 --dry-run", Step::Run(&[], 0)),
    ("snbuf recover snbuf-data/20261121T231000Z-0001", Step::Run(&[], 0)),
];

/// README.md's example commands: lines of its `sh` blocks that start with `snbuf `, without
/// their comments.
fn readme_commands() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut in_sh = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        let line = line.trim();
        if in_sh && line.starts_with("snbuf ") {
            let command = match line.find(" #") {
                Some(i) => &line[..i],
                None => line,
            };
            out.push(command.trim().to_string());
        }
    }
    out
}

/// `command` with each of `values` set: an option's value replaced where the command gives
/// it, added where it does not.
fn shortened(command: &str, values: &[(&str, &str)]) -> String {
    let mut words: Vec<String> = command.split_whitespace().map(String::from).collect();
    for (option, value) in values {
        match words.iter().position(|w| w == option) {
            Some(i) => words[i + 1] = value.to_string(),
            None => {
                words.push(option.to_string());
                words.push(value.to_string());
            }
        }
    }
    words.join(" ")
}

/// The sealed bursts under `data`, oldest first.
fn bursts(data: &Path) -> Vec<PathBuf> {
    let mut all: Vec<(u64, PathBuf)> = std::fs::read_dir(data)
        .map(|d| {
            d.filter_map(|e| {
                let p = e.ok()?.path();
                let m: Value =
                    serde_json::from_str(&std::fs::read_to_string(p.join("manifest.json")).ok()?)
                        .ok()?;
                Some((m["created_unix_ns"].as_u64()?, p))
            })
            .collect()
        })
        .unwrap_or_default();
    all.sort();
    all.into_iter().map(|(_, p)| p).collect()
}

fn manifest(burst: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(burst.join("manifest.json")).unwrap()).unwrap()
}

/// The first and last timestamps of link 0 of `burst`.
fn link_span(burst: &Path) -> (u64, u64) {
    let m = manifest(burst);
    let link = &m["links"][0];
    (
        link["first_timestamp"].as_u64().unwrap(),
        link["last_timestamp"].as_u64().unwrap(),
    )
}

#[test]
fn the_readmes_commands_run() {
    let listed: Vec<&str> = README.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        readme_commands(),
        listed,
        "README.md's commands changed: say here how each is tried"
    );
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let data = cwd.join("snbuf-data");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_snbuf")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut servers = Vec::new();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut first_burst: Option<PathBuf> = None;
    for (command, step) in README {
        let (values, code, background) = match step {
            Step::Skip(why) => {
                assert!(!why.is_empty());
                continue;
            }
            Step::Run(values, code) => (*values, *code, false),
            Step::Start(values) => (*values, 0, true),
        };
        let mut line = shortened(command.trim_end_matches(" &"), values);
        // Devices the README names are directories here.
        for device in ["/mnt/pmem0", "/mnt/nvme0", "/mnt/nvme1"] {
            let here = cwd.join(device.trim_start_matches('/'));
            std::fs::create_dir_all(&here).unwrap();
            line = line.replace(device, here.to_str().unwrap());
        }
        if line.contains("snbuf-data/20261121T231000Z-0001") {
            let burst = first_burst.as_ref().expect("a burst recorded before");
            line = line.replace("snbuf-data/20261121T231000Z-0001", burst.to_str().unwrap());
        }
        // `exec`: the shell becomes the command, so that killing it kills the server too.
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(format!("exec {line}"))
            .current_dir(cwd)
            .env("PATH", &path)
            .envs(env.iter().cloned());
        if background {
            sh.stdout(Stdio::null()).stderr(Stdio::null());
            servers.push(KillOnDrop(sh.spawn().unwrap()));
            wait_for_socket(&data.join("snbuf.sock"));
            continue;
        }
        let o = output_within(sh, COMMAND_DEADLINE);
        assert_eq!(
            o.status.code(),
            Some(code),
            "`{line}` (README: `{command}`):\n{}",
            common::stderr(&o)
        );
        if first_burst.is_none() {
            // The burst the README's `snbuf-data/20261121T231000Z-0001` stands for, and a range
            // of ticks its link 0 holds.
            first_burst = bursts(&data).first().cloned();
            let (first, last) = link_span(first_burst.as_ref().unwrap());
            env.push(("FROM".into(), first.to_string()));
            env.push(("TO".into(), ((first + last) / 2).to_string()));
        }
        if command.starts_with("snbuf trigger --pre 2s --post 5s --wait") {
            // Ticks the unit's buffers still hold: the newest of the burst just recorded.
            let (_, last) = link_span(&bursts(&data).pop().unwrap());
            env.push(("TICKS".into(), last.to_string()));
        }
        if command.starts_with("snbuf trigger --at") {
            // The window around TICKS is recorded, verified, and holds frames.
            let ticks: u64 = env
                .iter()
                .find(|(k, _)| k == "TICKS")
                .unwrap()
                .1
                .parse()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(60);
            let burst = loop {
                let found = bursts(&data).into_iter().find_map(|b| {
                    let m = manifest(&b);
                    (m["trigger"]["trigger_timestamp"].as_u64() == Some(ticks)
                        && m.get("verified").is_some())
                    .then_some(m)
                });
                if let Some(m) = found {
                    break m;
                }
                assert!(
                    Instant::now() < deadline,
                    "no burst for --at {ticks} within 60 s"
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            let frames: u64 = burst["links"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["frames"].as_u64().unwrap())
                .sum();
            assert!(frames > 0, "--at TICKS recorded no frame: {burst}");
        }
        if command.starts_with("snbuf extract") {
            let got = std::fs::metadata(cwd.join("part.bin")).unwrap().len();
            assert!(
                got > 0 && got.is_multiple_of(5568),
                "extract wrote whole frames: {got} B"
            );
        }
    }
    assert!(first_burst.is_some());
}
