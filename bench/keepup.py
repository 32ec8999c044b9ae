#!/usr/bin/env python3
"""The recorder's keep-up rate beside the raw medium (see keepup.sh)."""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

GIB = 1 << 30


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r


def window(args, target):
    """(buffer, pre, post): a window six times the buffer, so DRAM cannot hide a medium that falls
    behind. On memory the window is shorter (it must fit in RAM at rates of GB/s)."""
    if target == args.shm:
        return "200ms", "100ms", "1100ms"
    return args.buffer, "250ms", args.post


def probe(args, method, target, rate_total, n):
    """One fixed-length recording at `rate_total` bytes/s; returns (lost, frames bytes, cpu_s, report)."""
    out = tempfile.mkdtemp(prefix="keepup-", dir=target)
    js = os.path.join(out, "summary.json")
    buffer, pre, post = window(args, target)
    cmd = [args.snbuf, "record", "--links", str(args.links), "--rate-per-link", f"{rate_total / args.links:.0f}",
           "--buffer", buffer, "--pre", pre, "--post", post, "--trigger-after", "600ms",
           "--writers", str(args.writers), "--method", method, "--output", out, "--burst-id", f"p{n}", "--json", js]
    cpu0 = child_cpu_s()
    r = run(cmd)
    cpu = child_cpu_s() - cpu0
    try:
        rep = json.load(open(js)) if os.path.exists(js) else None
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if rep is None:
        sys.exit(f"keepup: snbuf record failed at {rate_total / 1e6:.0f} MB/s:\n{r.stderr.strip()}")
    recorded = rep["frames_recorded"] * rep["frame_bytes"]
    return rep["lost_frames"], recorded, cpu, rep


def keep_up(args, method, target):
    rate, ok, bad, probes = args.start, None, None, []
    n = 0
    while bad is None and rate < 64e9:
        n += 1
        lost, rec, cpu, rep = probe(args, method, target, rate, n)
        probes.append((rate, lost, rec, cpu, rep))
        print(f"  {method} on {target}: {rate / 1e6:8.0f} MB/s -> lost {lost}, output {rep['output_bytes_per_s'] / 1e6:.0f} MB/s, source behind {rep['skipped_at_source_per_link']}", file=sys.stderr, flush=True)
        if lost == 0 and rep["skipped_at_source_per_link"] == 0:
            ok, rate = rate, rate * 2
        else:
            bad = rate
    for _ in range(args.steps):
        if ok is None or bad is None:
            break
        rate = (ok + bad) / 2
        n += 1
        lost, rec, cpu, rep = probe(args, method, target, rate, n)
        probes.append((rate, lost, rec, cpu, rep))
        print(f"  {method} on {target}: {rate / 1e6:8.0f} MB/s -> lost {lost}, source behind {rep['skipped_at_source_per_link']}", file=sys.stderr, flush=True)
        if lost == 0 and rep["skipped_at_source_per_link"] == 0:
            ok = rate
        else:
            bad = rate
    best = max((p for p in probes if p[1] == 0), key=lambda p: p[0], default=None)
    source_limited = any(p[4]["skipped_at_source_per_link"] > 0 for p in probes)
    return ok or 0.0, best, source_limited


def bench_write(args, method, target, block, threads):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = run([args.snbuf, "bench", "write", "--target", target, "--method", method, "--block-size", str(block),
                 "--threads", str(threads), "--duration", "2s", "--region", "1GiB", "--json", f.name])
        if r.returncode != 0:
            sys.exit(f"keepup: bench write failed: {r.stderr.strip()}")
        return json.load(open(f.name))["results"][0]["gib_per_s"] * GIB


def fio_best(args, directory):
    best = 0.0
    for engine, extra in (("psync", []), ("libaio", ["--iodepth=32"]), ("io_uring", ["--iodepth=32"])):
        with tempfile.TemporaryDirectory(dir=directory, prefix="keepup-fio-") as d:
            r = run(["fio", "--name=k", f"--directory={d}", f"--ioengine={engine}", "--direct=1", "--rw=write",
                     "--bs=1m", "--size=1g", "--time_based", "--runtime=2", "--ramp_time=0.5", "--output-format=json", *extra])
            if r.returncode == 0:
                best = max(best, json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["write"]["bw_bytes"])
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--snbuf", required=True)
    p.add_argument("--disk", default="/var/tmp")
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--links", type=int, default=10)
    p.add_argument("--post", default="3s")
    p.add_argument("--buffer", default="500ms")
    p.add_argument("--start", type=float, default=200e6, help="first total rate to try, bytes/s")
    p.add_argument("--steps", type=int, default=4, help="bisection steps after the first loss")
    p.add_argument("--writers", type=int, default=0, help="writer threads (default: one per link)")
    p.add_argument("--methods", default="uring,direct,nt")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    args.writers = args.writers or args.links
    if args.quick:
        args.steps, args.post = 2, "2s"
    chunk = (1 << 20) // 5568 * 5568
    print(f"Recording window on disk: 250 ms before to {args.post} after the trigger, buffer {args.buffer}; on memory: 100 ms before to 1.1 s after, buffer 200 ms. {args.links} links of 5568 B frames, {args.writers} writer threads; {args.steps} bisection steps.")
    print()
    print("| method | target | keep-up rate | bench write (same method, chunk, writers) | ratio | fio best O_DIRECT 1 MiB, mean of before and after | ratio | CPU core-s per GiB at keep-up |")
    print("|---|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        target = args.shm if method in ("nt", "clwb", "clflushopt", "clflush", "msync", "pmdk") else args.disk
        # The disk drifts by tens of percent within minutes here: fio runs before and after the
        # bisection, and the ratio is to their mean (both are printed).
        fio_before = fio_best(args, target) if target == args.disk else None
        rate, best, source_limited = keep_up(args, method, target)
        bw = bench_write(args, method, target, chunk, args.writers)
        fio_after = fio_best(args, target) if target == args.disk else None
        fio = (fio_before + fio_after) / 2 if fio_before else None
        # Ingest + checksum + persist, from the recorder's thread CPU clocks over the recording.
        cpu_per_gib = best[4]["cpu_core_s_per_gib"] if best else float("nan")
        note = " (source-limited: the emulator, not the medium, set the limit)" if source_limited else ""
        fio_cols = (f"{fio / GIB:.2f} GiB/s ({fio_before / GIB:.2f} before, {fio_after / GIB:.2f} after) | {rate / fio:.2f}"
                    if fio else "n/a | n/a")
        print(f"| {method} | {target} | {rate / GIB:.2f} GiB/s{note} | {bw / GIB:.2f} GiB/s | {rate / bw:.2f} | {fio_cols} | {cpu_per_gib:.2f} |", flush=True)


if __name__ == "__main__":
    main()
