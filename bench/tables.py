#!/usr/bin/env python3
"""The published tables, made from the kept raw results, never typed by hand.

Each table lives in a Markdown file between two markers:

    <!-- table NAME: made by bench/tables.py from bench/results/NAME/, do not edit -->
    ...
    <!-- end table NAME -->

and is rendered from the newest result file in bench/results/NAME/ (files are named
<date>-<host>.json, so the newest sorts last). Its caption names the file, the machine and the
command that made it.

    python3 bench/tables.py            # rewrite every table in BENCHMARKS.md and RELIABILITY.md
    python3 bench/tables.py --check    # exit 1 if a committed table is not what its result gives
"""

import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # --root to work on a copy
DOCS = ["BENCHMARKS.md", "RELIABILITY.md"]
GIB = 1 << 30


def newest_result(name):
    files = sorted(glob.glob(os.path.join(HERE, "results", name, "*.json")))
    if not files:
        sys.exit(f"tables: no result in bench/results/{name}/")
    path = files[-1]
    with open(path) as f:
        return os.path.relpath(path, ROOT), json.load(f)


def num(v, fmt):
    return "–" if v is None else format(v, fmt)


def per_repeat(result, *path, fmt=".2f"):
    vals = []
    for r in result["repeats"]:
        v = r
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        vals.append(num(v, fmt))
    return ", ".join(vals)


def caption(path, result):
    m = result["machine"]
    return (f"From `{path}`: {result['date']}, {m.get('cpu_model') or '?'} with "
            f"{m.get('logical_cpus')} CPUs, Linux {m.get('kernel')}, commit {m.get('git_commit')}; "
            f"`{result['command']}`; median of {len(result['repeats'])} repeats.")


def ingest():
    path, r = newest_result("ingest")
    med = r["median"]
    rows = []
    names = {"gro": "snbuf, GRO + GSO (the default)",
             "plain": "snbuf, plain (`record --gro off`, `emit --gso off`)"}
    for mode in ("gro", "plain"):
        m = med.get(mode)
        if not m:
            continue
        limits = [rep[mode].get("limit_above") or "none failed" for rep in r["repeats"] if mode in rep]
        rows.append(
            f"| {names[mode]} | {num(m['loss_free_bytes_per_s'] and m['loss_free_bytes_per_s'] / GIB, '.2f')} GiB/s "
            f"| {num(m['ratio_to_iperf3'], '.2f')} "
            f"| {num(m['receive_cpu_core_s_per_gib'], '.3f')} "
            f"| {num(m['receive_cpu_over_memcpy'], '.2f')} "
            f"| {num(m['frames_per_receive'], '.1f')} "
            f"| {num(m['emit_cpu_core_s_per_gib'], '.3f')} "
            f"| {num(m['unit_to_disk_cpu_core_s_per_gib'], '.3f')} "
            f"| {'; '.join(f'({k + 1}) {w}' for k, w in enumerate(limits))} |")
    rows.append(f"| iperf3 -u -l 7200 (receive and discard) "
                f"| {num(med['iperf3_loss_free_bytes_per_s'] / GIB, '.2f')} GiB/s | 1.00 "
                f"| {num(med['iperf3_receiver_cpu_core_s_per_gib'], '.3f')} "
                f"| {num(med['iperf3_receiver_cpu_core_s_per_gib'] / med['memcpy_core_s_per_gib'], '.2f')} "
                f"| 1.0 | | | |")
    rows.append(f"| one plain memcpy pass over DRAM (`snbuf bench checksum`) | | "
                f"| {num(med['memcpy_core_s_per_gib'], '.3f')} | 1.00 | | | | |")
    unit_rate = ", ".join(num(rep.get("gro", {}).get("unit_to_disk", {}).get("bytes_per_s", 0) / GIB, ".2f")
                          for rep in r["repeats"])
    lines = [
        caption(path, r),
        "",
        "| | loss-free rate | / iperf3 | receive CPU (core-s/GiB) | / one memcpy | frames per receive "
        "| sender CPU (core-s/GiB) | whole unit, UDP to durable on disk (core-s/GiB) "
        "| the first probe above the loss-free rate failed by (per repeat) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
        f"Per repeat: GRO / plain loss-free rate {per_repeat(r, 'gro_over_plain_loss_free')}; "
        f"GRO receive CPU {per_repeat(r, 'gro', 'receive_cpu_core_s_per_gib', fmt='.3f')}, "
        f"plain {per_repeat(r, 'plain', 'receive_cpu_core_s_per_gib', fmt='.3f')}; "
        f"whole unit to disk (method {r['repeats'][0].get('gro', {}).get('unit_to_disk', {}).get('method')}, "
        f"at {unit_rate} GiB/s) GRO {per_repeat(r, 'gro', 'unit_to_disk', 'unit_cpu_core_s_per_gib', fmt='.3f')}, "
        f"plain {per_repeat(r, 'plain', 'unit_to_disk', 'unit_cpu_core_s_per_gib', fmt='.3f')}.",
    ]
    return "\n".join(lines)


TABLES = {"ingest": ingest}
BLOCK = re.compile(
    r"(<!-- table (?P<name>[a-z0-9_-]+): made by bench/tables.py from bench/results/[a-z0-9_-]+/, do not edit -->\n)"
    r"(?P<body>.*?)"
    r"(<!-- end table (?P=name) -->)", re.S)


def render(text):
    def one(m):
        name = m.group("name")
        if name not in TABLES:
            sys.exit(f"tables: no table named {name}")
        return m.group(1) + TABLES[name]() + "\n" + m.group(4)
    return BLOCK.sub(one, text)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    p.add_argument("--root", default=None, help="the tree to work on (default: this script's)")
    args = p.parse_args()
    global ROOT, HERE
    if args.root:
        ROOT = os.path.abspath(args.root)
        HERE = os.path.join(ROOT, "bench")
    stale = []
    for doc in DOCS:
        path = os.path.join(ROOT, doc)
        with open(path) as f:
            text = f.read()
        new = render(text)
        if new != text:
            if args.check:
                stale.append(doc)
            else:
                with open(path, "w") as f:
                    f.write(new)
                print(f"tables: rewrote {doc}")
    if stale:
        sys.exit(f"tables: {', '.join(stale)} differ from what bench/results/ gives: run python3 bench/tables.py")


if __name__ == "__main__":
    main()
