//! Bad input, table-driven, for every subcommand: missing and malformed arguments, zero and
//! negative sizes, unknown methods and frame types, paths that do not exist or cannot be written,
//! burst ids that would leave the output directory, config files with unknown keys. Each gets
//! exit code 2 and one error line that names the problem, and writes nothing: each case runs in
//! an empty working directory (where snbuf's default output would go) that must stay empty.

mod common;

use std::path::Path;
use std::process::Command;

use common::stderr;

struct Fixtures {
    dir: tempfile::TempDir,
}

impl Fixtures {
    fn new() -> Fixtures {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("unknown-key.toml"),
            "links = 2\nlinkz = 3\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("bad-value.toml"), "links = \"many\"\n").unwrap();
        std::fs::write(dir.path().join("empty.bin"), "").unwrap();
        std::fs::write(dir.path().join("not-json.json"), "{ nope").unwrap();
        Fixtures { dir }
    }
}

/// (arguments, a word the error line must contain). `{F}` stands for the fixtures directory.
const CASES: &[(&str, &str)] = &[
    // record
    ("record --links", "--links"),
    ("record --links 0", "at least one link"),
    ("record --links -1", "-1"),
    ("record --links ten", "ten"),
    ("record --rate-per-link 0", "more than 0"),
    ("record --rate-per-link -5MB/s", "-5"),
    ("record --rate-per-link fast", "fast"),
    ("record --buffer 0s", "--buffer"),
    ("record --buffer -1s", "-1"),
    ("record --buffer 1s --pre 5s", "pre"),
    ("record --frame wib9", "unknown frame type 'wib9'"),
    ("record --frame custom:0:10", "custom"),
    ("record --method warp", "unknown method"),
    ("record --chunk-frames 0", "at least one frame"),
    ("record --links 2 --writers 3", "--writers"),
    ("record --writers 0", "--writers"),
    ("record --cpus x", "CPU"),
    ("record --page-size 3KiB", "page size"),
    ("record --profile lhc", "unknown profile"),
    ("record --burst-id a/b", "not a plain name"),
    ("record --burst-id ../x", "not a plain name"),
    ("record --burst-id ..", "not a plain name"),
    ("record --burst-id .hidden", "not a plain name"),
    ("record --output /proc/snbuf-cannot-be-here", "/proc/snbuf-cannot-be-here"),
    ("record --output out --output out/.", "given twice"),
    ("record --output out --output /proc/snbuf-x", "/proc/snbuf-x"),
    ("record --replay /nonexistent/frames.bin", "/nonexistent/frames.bin"),
    ("record --replay {F}/empty.bin", "empty"),
    ("record --config /nonexistent/snbuf.toml", "/nonexistent/snbuf.toml"),
    ("record --config {F}/unknown-key.toml", "linkz"),
    ("record --config {F}/bad-value.toml", "links"),
    ("record --json /nonexistent/dir/summary.json", "--json"),
    ("record --status-file /nonexistent/dir/status.json", "--status-file"),
    ("record --inject-fault boom", "unknown fault"),
    ("record --inject-fault slow", "rate"),
    ("record --inject-fault lost-flush:link=1", "no keys"),
    ("record --inject-fault slow-completion", "delay=TIME"),
    ("record --inject-fault stall:delay=1s", "slow-completion only"),
    ("record --completion-deadline 0s", "completion-deadline"),
    ("record --max-burst 10s --max-window 20s", "--max-burst 10s is shorter"),
    ("record --max-burst 0s", "max-burst"),
    ("record --bogus", "--bogus"),
    // record from the network
    ("record --source tcp://1.2.3.4:5", "udp://"),
    ("record --source udp://nohost", "not ADDR:PORT"),
    ("record --source udp://127.0.0.1:99999", "not ADDR:PORT"),
    ("record --source udp://127.0.0.1:0 --frame wibeth --links 2 --streams 1", "--streams"),
    ("record --source udp://127.0.0.1:0 --frame wibeth --links 2 --streams 1,1", "routed twice"),
    ("record --source udp://127.0.0.1:0 --links 2 --frame protodune-wib", "stream_id"),
    ("record --source udp://127.0.0.1:0 --header-version 99", "--header-version"),
    ("record --source udp://127.0.0.1:0 --rcvbuf 0", "--rcvbuf"),
    ("record --source udp://127.0.0.1:0 --gro maybe", "--gro"),
    ("record --gro off", "--gro needs --source udp"),
    ("record --source udp://127.0.0.1:0 --receive-nap 1s", "more than 100ms"),
    ("record --source udp://127.0.0.1:0 --receive-nap soon", "--receive-nap"),
    ("record --receive-nap off", "--receive-nap needs --source udp"),
    ("record --receive-batch 8", "--receive-batch needs --source udp"),
    ("record --source udp://127.0.0.1:0 --receive-batch 0", "--receive-batch"),
    ("record --source udp://127.0.0.1:0 --receive-batch 65", "--receive-batch"),
    ("record --source udp://127.0.0.1:0 --gro off --receive-batch 8", "--gro off"),
    ("record --source udp://127.0.0.1:0 --replay {F}/empty.bin", "--replay"),
    ("record --streams 1", "--source udp"),
    ("record --links 2 --source-ids 1", "source ids"),
    ("record --run -3", "-3"),
    // emit
    ("emit", "--to"),
    ("emit --to nowhere", "udp://"),
    ("emit --to udp://127.0.0.1:9 --links 0", "--links"),
    ("emit --to udp://127.0.0.1:9 --frame wib9", "wib9"),
    ("emit --to udp://127.0.0.1:9 --rate-per-link 0", "--rate-per-link"),
    ("emit --to udp://127.0.0.1:9 --clock-offset=-1fortnight", "--clock-offset"),
    ("emit --to udp://127.0.0.1:9 --clock-offset yesterday", "--clock-offset"),
    ("emit --to udp://127.0.0.1:9 --gso sometimes", "--gso"),
    ("emit --to udp://127.0.0.1:9 --replay /nonexistent/0.bin", "/nonexistent/0.bin"),
    ("emit --to udp://127.0.0.1:9 --frame wibeth --replay {F}/empty.bin", "empty"),
    ("emit --to udp://127.0.0.1:9 --links 2 --streams 1", "--streams"),
    ("emit --to udp://127.0.0.1:9 --links 2 --frame wib2", "stream_id"),
    ("emit --to udp://127.0.0.1:9 --cpu 99999", "--cpu"),
    ("emit --to udp://127.0.0.1:9 --frame custom:70000:1 --duration 1s", "datagram"),
    ("emit --to udp://127.0.0.1:9 --clock-offset 4000000d --duration 1s", "--clock-offset"),
    ("emit --to udp://127.0.0.1:9 --duration 0s", "--duration"),
    ("emit --to udp://127.0.0.1:9 --duration 1ms --json /nonexistent/d/x.json", "--json"),
    // serve
    ("serve --links 0", "at least one link"),
    ("serve --method warp", "unknown method"),
    ("serve --socket /nonexistent/dir/ctl.sock", "--socket"),
    ("serve --burst-id ../x", "not a plain name"),
    // trigger (checked before any server is asked)
    ("trigger --at yesterday", "yesterday"),
    ("trigger --pre -1s", "-1"),
    ("trigger --post soon", "soon"),
    ("trigger --burst-id ../x", "not a plain name"),
    ("trigger --burst-id a/b", "not a plain name"),
    // status
    ("status --socket", "--socket"),
    ("status --verbose", "--verbose"),
    // verify and recover
    ("verify", "BURST_DIR"),
    ("verify /nonexistent/burst", "/nonexistent/burst"),
    ("verify {F}/empty.bin", "not a directory"),
    ("recover", "BURST_DIR"),
    ("recover /nonexistent/burst", "/nonexistent/burst"),
    ("recover {F}/empty.bin", "not a directory"),
    // plan
    ("plan", "--input-rate"),
    ("plan --input-rate 0 --time 100s --output-rate 1GB/s", "more than 0"),
    ("plan --input-rate 10GB/s --time -1s --output-rate 1GB/s", "-1"),
    ("plan --input-rate 10GB/s --time 100s", "output"),
    ("plan --input-rate 10GB/s --time 100s --bench /nonexistent/r.json --method nt --block-size 4KiB", "/nonexistent/r.json"),
    ("plan --input-rate 10GB/s --time 100s --bench {F}/not-json.json --method nt --block-size 4KiB", "not-json.json"),
    // bench
    ("bench write --target /nonexistent/dir/file", "/nonexistent/dir/file"),
    ("bench write --block-size 0", "more than 0"),
    ("bench write --block-size -4KiB", "-4"),
    ("bench write --threads 0", "--threads"),
    ("bench write --method warp", "unknown method"),
    ("bench read --block-size lots", "lots"),
    ("bench frobnicate", "frobnicate"),
    ("bench latency --access-size 100", "multiple of 64"),
    ("bench latency --access-size 0", "more than 0"),
    ("bench latency --target /nonexistent/dir/x", "/nonexistent/dir/x"),
    ("bench latency --page-size 3KiB", "page size"),
    ("bench join --table-on disk", "disk"),
    ("bench kernels --n 100000 --kernel gemm", "--n 100000: gemm needs"),
    ("bench kernels --n 18446744073709551615", "more than 16 EiB"),
    ("bench join --locks spinny", "unknown lock 'spinny'"),
    ("bench join --r-rows 0", "more than 0"),
    ("bench join --s-rows many", "many"),
    ("bench join --threads 0", "--threads"),
    ("bench join --table-on target --target /nonexistent/dir/x", "/nonexistent/dir/x"),
    ("bench kernels --kernel fft", "unknown kernel 'fft'"),
    ("bench kernels --n 2", "--n"),
    ("bench kernels --page-size 1GiB", "page size"),
    ("bench app --method warp", "unknown method"),
    ("bench app --target /nonexistent/dir", "/nonexistent/dir"),
    ("bench app --duration 0s", "--duration"),
    ("bench paper", "--target"),
    ("bench paper --target /nonexistent/dir", "/nonexistent/dir"),
    ("bench paper --target {F} --out {F}", "not empty"),
    ("report", "RESULTS_DIR"),
    ("report /nonexistent/results", "/nonexistent/results"),
    ("report {F}", "no results"),
    // export and the fleet
    ("export", "BURST_DIR"),
    ("export /nonexistent/burst --to file:///tmp/x", "/nonexistent/burst"),
    ("export {F} --to file:///tmp/x", "manifest"),
    ("export {F} --to gopher://x", "expected s3://"),
    ("export {F} --to file:///tmp/x --rate fast", "rate"),
    ("serve --export-rate 1MB/s", "--export-to"),
    ("serve --export-to ftp://x", "expected s3://"),
    ("serve --nats --unit a.b", "unit id"),
    ("serve --nats http://x", "--nats"),
    ("serve --metrics localhost", "--metrics"),
    ("trigger --nats nats://127.0.0.1:1 --wait", "--wait"),
    ("fleet status --nats http://x", "--nats"),
    ("fleet status --nats nats://127.0.0.1:1,http://x", "http://x"),
    ("trigger --nats nats://127.0.0.1:1,", "empty server"),
    ("fleet setup --nats nats://127.0.0.1:1 --nats-replicas 9", "--nats-replicas"),
    ("fleet bench --units 0", "--units"),
    // ls, manuals, live views, logs, drains
    ("ls /nonexistent/snbuf-data", "not a directory"),
    ("ls {F}/empty.bin", "not a directory"),
    ("man {F}/empty.bin", "not a directory"),
    ("completions tcsh", "tcsh"),
    ("status --watch --json", "--watch"),
    ("fleet events --watch", "--watch"),
    ("fleet status --watch --json", "--watch"),
    ("serve --log-format xml", "xml"),
    ("serve --drain-timeout 0s", "--drain-timeout"),
    // inspect and extract
    ("inspect /nonexistent/burst", "not a burst"),
    ("inspect {F}", "burst"),
    ("inspect {F} --link x", "x"),
    ("extract /nonexistent/burst --link 0 --out {F}/x.bin", "not a burst"),
    ("extract {F} --out {F}/x.bin", "--link"),
    ("convert", "BURST_DIR"),
    ("show /nonexistent/burst", "not a burst"),
    ("show {F}", "burst"),
    ("show {F} --columns 2", "--columns"),
    ("show {F} --link x", "x"),
    ("show {F} --out {F}/page", "inside the burst"),
    // methods, and no such command
    ("methods --bogus", "--bogus"),
    ("frobnicate", "frobnicate"),
];

#[test]
fn every_subcommand_refuses_bad_input_with_one_line_and_exit_2_writing_nothing() {
    let fixtures = Fixtures::new();
    let mut failures = Vec::new();
    for (args, needle) in CASES {
        let cwd = tempfile::tempdir().unwrap();
        let argv: Vec<String> = args
            .split_whitespace()
            .map(|a| a.replace("{F}", fixtures.dir.path().to_str().unwrap()))
            .collect();
        // Refused before anything starts: a case that ran instead (a server, a watch, a wait)
        // fails here rather than hanging the suite.
        let o = common::output_within(
            Command::new(env!("CARGO_BIN_EXE_snbuf"))
                .args(&argv)
                .current_dir(cwd.path()),
            std::time::Duration::from_secs(30),
        );
        let err = stderr(&o);
        let error_lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
        let left: Vec<_> = std::fs::read_dir(cwd.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let problem = if o.status.code() != Some(2) {
            Some(format!("exit {:?}", o.status.code()))
        } else if err.contains("panicked") {
            Some("panicked".into())
        } else if error_lines.len() != 1 {
            Some(format!("{} error lines", error_lines.len()))
        } else if !error_lines[0].contains(needle) && !clap_lists(&err, needle) {
            Some(format!("'{needle}' not in the error"))
        } else if !left.is_empty() {
            Some(format!("wrote {left:?}"))
        } else {
            None
        };
        if let Some(p) = problem {
            failures.push(format!(
                "snbuf {args}: {p}\n    {}",
                err.trim().replace('\n', "\n    ")
            ));
        }
    }
    assert!(fixtures_untouched(fixtures.dir.path()));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// clap names missing arguments on the lines after its one error line.
fn clap_lists(err: &str, needle: &str) -> bool {
    err.contains("required arguments were not provided") && err.contains(needle)
}

fn fixtures_untouched(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().count() == 4
}
