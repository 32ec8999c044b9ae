#!/usr/bin/env python3
"""Runs snbuf beside fio and a PMDK loop on the same targets and prints ratios (see peers.sh)."""

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile

GIB = 1 << 30


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"peers: {' '.join(map(shlex.quote, cmd))} failed:\n{r.stderr.strip()}")
    return r.stdout


def snbuf(args, method, target, bs, threads, extra=()):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [args.snbuf, "bench", "write", "--target", target, "--method", method,
               "--block-size", str(bs), "--threads", str(threads),
               "--duration", f"{args.duration}s", "--warmup", "500ms",
               "--region", str(args.region), "--json", out.name, *extra]
        run(cmd)
        r = json.load(open(out.name))["results"][0]
        return r["gib_per_s"], r["mops_per_s"]


def pmdk_loop(args, target, bs, threads, avx512):
    path = os.path.join(target, f"peers-pmdk-{os.getpid()}.dat")
    env = dict(os.environ)
    if avx512:
        env["PMEM_AVX512F"] = "1"
    try:
        out = run([args.pmem_loop, path, str(bs), str(threads), str(args.duration), str(args.region)], env)
    finally:
        if os.path.exists(path):
            os.remove(path)
    f = out.split()
    return float(f[4]), float(f[5])


def fio(args, directory, engine, bs, threads, extra=()):
    env = dict(os.environ)
    if engine == "libpmem":
        # fio's libpmem engine refuses a file libpmem does not see as pmem; PMDK's documented
        # test switch makes it treat the tmpfs file as pmem (same instructions, not durable).
        env["PMEM_IS_PMEM_FORCE"] = "1"
    with tempfile.TemporaryDirectory(dir=directory, prefix="peers-fio-") as d:
        cmd = ["fio", "--name=peer", f"--directory={d}", f"--ioengine={engine}", "--rw=write",
               f"--bs={bs}", f"--size={args.region}", f"--numjobs={threads}", "--thread",
               "--group_reporting", "--time_based", f"--runtime={args.duration}",
               "--ramp_time=0.5", f"--cpus_allowed=0-{os.cpu_count() - 1}",
               "--cpus_allowed_policy=split", "--output-format=json", *extra]
        out = run(cmd, env)
        job = json.loads(out[out.index("{"):])["jobs"][0]["write"]
        return job["bw_bytes"] / GIB, job["iops"] / 1e6


def median_of(rounds):
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)


def human_bs(bs):
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if bs % n == 0:
            return f"{bs // n} {unit}"
    return f"{bs} B"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--snbuf", required=True)
    p.add_argument("--pmem-loop", required=True)
    p.add_argument("--quick", action="store_true", help="1 round of 1 s, fewer points")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=2.0)
    p.add_argument("--region", type=int, default=1 << 30, help="bytes per thread")
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--disk", default="/var/tmp")
    p.add_argument("--json", help="the raw result (default: bench/results/peers/<date>-<host>.json)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.duration = 1, 1.0
    ncpu = os.cpu_count()
    threads = list(range(1, ncpu + 1))
    blocks = [256, 4096, 5568, 65536, 1 << 20]
    points = []

    def point(section, bs, t, rs):
        """Keeps one point: per series, every round's (GiB/s, Mops/s)."""
        points.append({"section": section, "block_bytes": bs, "threads": t,
                       "rounds": {k: [list(x) for x in v] for k, v in rs.items() if v}})
        m = {k: round(median_of(v)[0], 3) for k, v in rs.items() if v}
        print(f"{section} {human_bs(bs)} x{t}: " + ", ".join(f"{k} {v} GiB/s" for k, v in m.items()), flush=True)

    # The pmem stand-in: every write made durable before the next (a fence per block). snbuf nt
    # timed per operation (its default) and untimed; PMDK's loop (best of its default and
    # AVX-512 paths); fio libpmem and fio mmap (msync per write; not below a page).
    for bs in blocks:
        for t in threads:
            rs = {k: [] for k in ("nt", "nt_untimed", "pmdk", "fio_libpmem", "fio_mmap")}
            for _ in range(args.rounds):
                rs["nt"].append(snbuf(args, "nt", args.shm, bs, t))
                rs["pmdk"].append(max(pmdk_loop(args, args.shm, bs, t, False), pmdk_loop(args, args.shm, bs, t, True)))
                rs["nt_untimed"].append(snbuf(args, "nt", args.shm, bs, t, ("--latency-every", "0")))
                rs["fio_libpmem"].append(fio(args, args.shm, "libpmem", bs, t, ("--direct=1", "--sync=1")))
                if bs % 4096 == 0:
                    rs["fio_mmap"].append(fio(args, args.shm, "mmap", bs, t, ("--fdatasync=1",)))
            point("pmem", bs, t, rs)

    # The disk, raw speed: one fdatasync at the end (inside the timing) vs fio direct=1.
    for bs in (4096, 1 << 20):
        rs = {k: [] for k in ("direct", "uring", "fio_psync", "fio_libaio", "fio_io_uring")}
        for _ in range(args.rounds):
            rs["direct"].append(snbuf(args, "direct", args.disk, bs, 1, ("--persist-every", "end")))
            rs["fio_psync"].append(fio(args, args.disk, "psync", bs, 1, ("--direct=1",)))
            rs["uring"].append(snbuf(args, "uring", args.disk, bs, 1, ("--persist-every", "end", "--queue-depth", "32")))
            rs["fio_io_uring"].append(fio(args, args.disk, "io_uring", bs, 1, ("--direct=1", "--iodepth=32", "--fixedbufs=1", "--registerfiles=1")))
            rs["fio_libaio"].append(fio(args, args.disk, "libaio", bs, 1, ("--direct=1", "--iodepth=32")))
        point("disk", bs, 1, rs)

    # The disk, durable per write: fdatasync after each block.
    for bs in (4096, 1 << 20):
        rs = {"direct": [], "fio_psync_fdatasync": []}
        for _ in range(args.rounds):
            rs["direct"].append(snbuf(args, "direct", args.disk, bs, 1))
            rs["fio_psync_fdatasync"].append(fio(args, args.disk, "psync", bs, 1, ("--direct=1", "--fdatasync=1")))
        point("disk_durable", bs, 1, rs)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keep
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    result = {"suite": "peers", "date": date,
              "command": "bench/peers.sh " + " ".join(a for a in sys.argv[5:] if not a.startswith("--json")),
              "machine": keep.machine(), "rounds": args.rounds, "duration_s": args.duration,
              "region_bytes": args.region, "shm": args.shm, "disk": args.disk, "points": points}
    path = args.json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "peers",
                                     f"{date}-{platform.node()}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"wrote {path}; python3 bench/tables.py puts it in BENCHMARKS.md")


if __name__ == "__main__":
    main()
