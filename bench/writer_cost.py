#!/usr/bin/env python3
"""Runs `snbuf record` at two commits alternately and writes one JSON line per run and a summary
line: the writer threads' CPU per GiB recorded, and the process's less the emulated links'.
bench/writer_cost.sh builds both and keeps the lines."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

GIB = float(1 << 30)


def one_run(binary, label, args, n):
    out = os.path.join(args.work, "out")
    report = os.path.join(args.work, "record.json")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "record", "--links", str(args.links),
           "--rate-per-link", f"{args.rate_mb_s}MB/s", "--output", out, "--json", report]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        sys.exit(f"writer_cost: {label} run {n} did not end within 300 s")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if done.returncode != 0:
        sys.exit(f"writer_cost: {label} run {n} failed: {done.stderr.strip()[-400:]}")
    with open(report) as f:
        r = json.load(f)
    recorded = r["frames_recorded"] * r["frame_bytes"]
    return {"kind": "run", "build": label, "run": n, "method": r["method"],
            "links": args.links, "rate_mb_s_per_link": args.rate_mb_s,
            "recorded_bytes": recorded, "lost_frames": r["lost_frames"], "valid": r["valid"],
            "writer_cpu_s": r["writer_cpu_s"],
            "writer_core_s_per_gib": r["writer_cpu_s"] / (recorded / GIB),
            "unit_core_s_per_gib": r["unit_cpu_core_s_per_gib"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--head", required=True)
    p.add_argument("--base", required=True)
    p.add_argument("--base-commit", required=True)
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--links", type=int, default=10)
    p.add_argument("--rate-mb-s", type=int, default=100)
    p.add_argument("--work", required=True)
    p.add_argument("--lines", required=True)
    args = p.parse_args()
    rows = []
    for n in range(args.runs):
        # Alternated, and the order swapped each pair: neither build always runs on a warm cache.
        pair = [("head", args.head), ("base", args.base)]
        for label, binary in (pair if n % 2 == 0 else pair[::-1]):
            row = one_run(binary, label, args, n)
            print(f"{label} run {n}: writer {row['writer_core_s_per_gib']:.4f} core-s/GiB, "
                  f"unit {row['unit_core_s_per_gib']:.4f}, lost {row['lost_frames']}", flush=True)
            rows.append(row)
    med, quiet = {}, {}
    for label in ("head", "base"):
        mine = [r for r in rows if r["build"] == label]
        med[label] = {k: statistics.median(r[k] for r in mine)
                      for k in ("writer_core_s_per_gib", "unit_core_s_per_gib")}
        # A shared machine's noise only ever adds CPU time, and here it comes run by run (a run
        # is quiet or about twice as dear): the lower quartile is each build's own cost.
        quiet[label] = statistics.quantiles([r["writer_core_s_per_gib"] for r in mine], n=4)[0]
    whole = all(r["lost_frames"] == 0 and r["valid"] for r in rows)
    head_whole = all(r["lost_frames"] == 0 and r["valid"] for r in rows if r["build"] == "head")
    summary = {"kind": "summary", "base_commit": args.base_commit, "runs": args.runs,
               "links": args.links, "rate_mb_s_per_link": args.rate_mb_s,
               "method": rows[0]["method"],
               "head_writer_core_s_per_gib": med["head"]["writer_core_s_per_gib"],
               "base_writer_core_s_per_gib": med["base"]["writer_core_s_per_gib"],
               "writer_ratio": med["head"]["writer_core_s_per_gib"]
               / med["base"]["writer_core_s_per_gib"],
               "head_writer_quiet_core_s_per_gib": quiet["head"],
               "base_writer_quiet_core_s_per_gib": quiet["base"],
               "writer_quiet_ratio": quiet["head"] / quiet["base"],
               "head_unit_core_s_per_gib": med["head"]["unit_core_s_per_gib"],
               "base_unit_core_s_per_gib": med["base"]["unit_core_s_per_gib"],
               "unit_ratio": med["head"]["unit_core_s_per_gib"]
               / med["base"]["unit_core_s_per_gib"],
               "every_run_whole": whole, "every_head_run_whole": head_whole}
    # The target: the writer no dearer than the base's, every window of this commit whole (a
    # base run's loss is reported, but says nothing of this code).
    summary["pass"] = summary["writer_ratio"] <= 1.0 and head_whole
    rows.append(summary)
    print(json.dumps(summary), flush=True)
    with open(args.lines, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
