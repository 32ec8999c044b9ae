#!/usr/bin/env python3
"""Keeps a bench script's raw figures: the JSON lines a test wrote (one per method, trial set or
run) become bench/results/SUITE/<date>-<host>.json, with the date, the machine and the command
that made them. bench/tables.py renders the published tables from these files.

    python3 bench/keep.py SUITE LINES_FILE --command "bench/powercut.sh 25 7" [--seconds S]

Every row also records the command, commit and run time that made it; with --append the rows go after
those already in the day's file (several runs of one script, as the soak's table shows).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def git_commit():
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def machine():
    return {"hostname": platform.node(), "cpu_model": cpu_model(),
            "logical_cpus": os.cpu_count(), "kernel": platform.release(),
            "git_commit": git_commit()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite")
    p.add_argument("lines", help="a file of JSON lines, one per row")
    p.add_argument("--command", required=True, help="the command that made the lines")
    p.add_argument("--seconds", type=float, help="how long the run took")
    p.add_argument("--out", help="where to write (default bench/results/SUITE/<date>-<host>.json)")
    p.add_argument("--append", action="store_true",
                   help="add the rows to those of the file already there")
    args = p.parse_args()
    rows = []
    with open(args.lines) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"keep: {args.lines} line {n}: {e}")
    if not rows:
        sys.exit(f"keep: {args.lines} has no result: nothing kept")
    commit = git_commit()
    for row in rows:
        row.setdefault("command", args.command)
        row.setdefault("seconds", args.seconds)
        row.setdefault("git_commit", commit)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = args.out
    if path is None:
        d = os.path.join(HERE, "results", args.suite)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{date}-{platform.node()}.json")
        if os.path.exists(path) and not args.append:
            # A second run the same day is kept beside the first (bench/tables.py takes the later).
            minute = datetime.datetime.now(datetime.timezone.utc).strftime("%H%M")
            path = os.path.join(d, f"{date}-{minute}-{platform.node()}.json")
    if args.append and os.path.exists(path):
        with open(path) as f:
            rows = json.load(f)["rows"] + rows
    result = {"suite": args.suite, "date": date, "command": args.command,
              "machine": machine(), "seconds": args.seconds, "rows": rows}
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"kept {os.path.relpath(path, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
