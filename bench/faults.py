#!/usr/bin/env python3
"""Injected faults through the real recorder, kept as a result: each scenario is one
`snbuf record` with a fault (a failed fdatasync, EIO on a write, a full file system, a slow
medium, a device that stops completing), read back from its --json summary: per link the frames
recorded and lost, its state and error, the burst's state, the exit code, the first warning and
the peak resident memory. bench/tables.py makes RELIABILITY.md's table from the kept file.

    python3 bench/faults.py [--snbuf PATH]     # root, for the small tmpfs of the full-disk case

The raw result goes to bench/results/faults/<date>-<host>.json.
"""

import argparse
import json
import os
import threading
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = ["--links", "3", "--rate-per-link", "20MB/s", "--buffer", "1s", "--pre", "500ms",
          "--post", "1s", "--trigger-after", "600ms"]
SCENARIOS = [
    ("failed fdatasync, link 1, 3rd persist", "direct", ["--inject-fault", "persist-eio:link=1,after=2"], None),
    ("EIO on a write, link 2, past 6 MiB", "uring", ["--inject-fault", "write-eio:link=2,after=6MiB"], None),
    ("disk full: a 24 MiB tmpfs for the window", "nt", [], "size=24M"),
    ("slow medium: 6 MB/s per link against 20 MB/s of input", "direct", ["--inject-fault", "slow:rate=6MB/s"], None),
    # A device that stops completing: with the default method (io_uring, one writer for every
    # link) and the default deadline (half the buffer, at least 1 s), then each block method, and
    # a stall of five buffer lengths. The healthy links must lose nothing.
    ("a device that stops completing, link 0, past 2 MiB; default method and deadline", None,
     ["--inject-fault", "stall:link=0,after=2MiB"], None),
    ("the same", "uring", ["--inject-fault", "stall:link=0,after=2MiB"], None),
    ("the same", "direct", ["--inject-fault", "stall:link=0,after=2MiB"], None),
    ("the same", "buffered", ["--inject-fault", "stall:link=0,after=2MiB"], None),
    ("the same, stalled for five buffer lengths", "uring",
     ["--inject-fault", "stall:link=0,after=2MiB", "--completion-deadline", "5s"], None),
    # A write that blocks in the kernel and never returns: only the watchdog gets the link out.
    ("a write stuck in the kernel, link 0, past 2 MiB", "direct",
     ["--inject-fault", "hang:link=0,after=2MiB"], None),
    ("the same; links 0 and 2 share a writer (a mapped method has one per CPU)", "msync",
     ["--inject-fault", "hang:link=0,after=2MiB"], None),
]


def run_measured(cmd, timeout_s):
    """Runs `cmd` (killed past `timeout_s`); returns what it printed and its own peak resident
    memory in KiB (wait4's rusage of that child alone)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        timer = threading.Timer(timeout_s, child.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(cmd, child.returncode, out.read(), err.read())
        return done, usage.ru_maxrss


def run(snbuf, name, method, extra, tmpfs):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        if tmpfs:
            os.makedirs(out)
            subprocess.run(["mount", "-t", "tmpfs", "-o", tmpfs, "tmpfs", out], check=True, timeout=60)
        try:
            js = os.path.join(d, "summary.json")
            chosen = ["--method", method] if method else []
            cmd = [snbuf, "record", *COMMON, *chosen, "--output", out, "--json", js, *extra]
            started = time.monotonic()
            p, peak_kib = run_measured(cmd, timeout_s=300)
            seconds = time.monotonic() - started
            summary = json.load(open(js)) if os.path.exists(js) else {}
        finally:
            if tmpfs:
                subprocess.run(["umount", out], timeout=60)
    warnings = [l.strip() for l in p.stderr.splitlines() if "warning" in l.lower() or "has room for" in l]
    shown = " ".join(a if a != out else "OUT" for a in cmd[1:] if a not in (js,))
    return {
        "scenario": name, "method": summary.get("method") or method or "default",
        "method_chosen": method is None, "wall_seconds": round(seconds, 1), "command": "snbuf " + shown.replace(snbuf, "snbuf"),
        "tmpfs": tmpfs, "exit_code": p.returncode, "burst_state": summary.get("state"),
        "valid": summary.get("valid"), "first_warning": warnings[0] if warnings else None,
        "peak_rss_kib": peak_kib,
        "buffer_memory_bytes": summary.get("buffer_memory_bytes"),
        "links": [{k: l.get(k) for k in ("link", "state", "chunks", "frames", "lost_frames", "error")}
                  for l in summary.get("links", [])],
        "stderr_tail": p.stderr.strip().splitlines()[-3:],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snbuf", default=os.path.join(os.path.dirname(HERE), "target", "release", "snbuf"))
    args = p.parse_args()
    if not os.path.exists(args.snbuf):
        sys.exit(f"faults: no {args.snbuf}: cargo build --release first")
    lines = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    for name, method, extra, tmpfs in SCENARIOS:
        row = run(args.snbuf, name, method, extra, tmpfs)
        print(f"{name}: exit {row['exit_code']}, burst {row['burst_state']}, links "
              + "; ".join(f"{l['link']} {l['state']} {l['frames']} kept {l['lost_frames']} lost" for l in row["links"]),
              flush=True)
        lines.write(json.dumps(row) + "\n")
    lines.close()
    subprocess.run([sys.executable, os.path.join(HERE, "keep.py"), "faults", lines.name,
                    "--command", "python3 bench/faults.py"], check=True)
    os.unlink(lines.name)


if __name__ == "__main__":
    main()
