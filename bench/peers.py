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
    p.add_argument("--markdown", help="also write the tables to this file")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.duration = 1, 1.0
    ncpu = os.cpu_count()
    threads = list(range(1, ncpu + 1))
    blocks = [256, 4096, 5568, 65536, 1 << 20]
    lines = []

    def out(s=""):
        print(s, flush=True)
        lines.append(s)

    out(f"## snbuf vs peers, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    out()
    out(f"Command: `bench/peers.sh {' '.join(sys.argv[5:])}`".replace("  ", " "))
    out(f"Machine: {platform.node()}, {ncpu} CPUs, {platform.release()}; "
        f"{args.rounds} interleaved round(s) of {args.duration:g} s per point, medians; region {args.region >> 20} MiB per thread.")
    out()

    # --- the pmem stand-in -------------------------------------------------------------------
    out(f"### Persistent-memory path on {args.shm} (tmpfs: same instructions, not durable)")
    out()
    out("Every write is made durable before the next (a fence per block): snbuf `nt --persist-every op`; "
        "PMDK `pmem_memcpy_persist` (best of libpmem's default and PMEM_AVX512F=1); fio libpmem "
        "`direct=1 sync=1` (with PMEM_IS_PMEM_FORCE=1, without which it refuses tmpfs); fio mmap `fdatasync=1` (msync per write). snbuf times every operation "
        "(`--latency-every 1`, its default); the `untimed` column is `--latency-every 0`, as the peers "
        "time nothing per operation.")
    out()
    out("| block | thr | snbuf nt | snbuf nt untimed | PMDK loop | fio libpmem | fio mmap | nt/PMDK | untimed/PMDK | nt/best fio |")
    out("|---|---|---|---|---|---|---|---|---|---|")
    for bs in blocks:
        for t in threads:
            rs = {k: [] for k in ("nt", "ntu", "pmdk", "fiop", "fiom")}
            for _ in range(args.rounds):
                rs["nt"].append(snbuf(args, "nt", args.shm, bs, t))
                rs["pmdk"].append(max(pmdk_loop(args, args.shm, bs, t, False), pmdk_loop(args, args.shm, bs, t, True)))
                rs["ntu"].append(snbuf(args, "nt", args.shm, bs, t, ("--latency-every", "0")))
                rs["fiop"].append(fio(args, args.shm, "libpmem", bs, t, ("--direct=1", "--sync=1")))
                # fio's mmap engine cannot msync less than a page: no durable mmap figure below 4 KiB.
                if bs % 4096 == 0:
                    rs["fiom"].append(fio(args, args.shm, "mmap", bs, t, ("--fdatasync=1",)))
            m = {k: median_of(v)[0] for k, v in rs.items() if v}
            best_fio = max(m["fiop"], m.get("fiom", 0.0))
            fiom = f"{m['fiom']:.2f}" if "fiom" in m else "n/a"
            out(f"| {human_bs(bs)} | {t} | {m['nt']:.2f} | {m['ntu']:.2f} | {m['pmdk']:.2f} | {m['fiop']:.2f} | {fiom} "
                f"| {m['nt'] / m['pmdk']:.3f} | {m['ntu'] / m['pmdk']:.3f} | {m['nt'] / best_fio:.3f} |")
    out()
    out("Throughput in GiB/s.")
    out()

    # --- the disk ----------------------------------------------------------------------------
    out(f"### Disk ({args.disk}), O_DIRECT, one thread")
    out()
    out("Raw medium speed: snbuf `--persist-every end` (one fdatasync at the end, inside the timing) vs fio "
        "`direct=1` (no fsync). fio psync is queue depth 1; libaio and io_uring iodepth=32 (io_uring with "
        "fixedbufs and registerfiles); snbuf uring `--queue-depth 32`, snbuf direct is synchronous.")
    out()
    out("| block | snbuf direct | snbuf uring | fio psync | fio libaio | fio io_uring | direct/psync | uring/io_uring | direct/io_uring |")
    out("|---|---|---|---|---|---|---|---|---|")
    for bs in (4096, 1 << 20):
        rs = {k: [] for k in ("direct", "uring", "psync", "libaio", "io_uring")}
        for _ in range(args.rounds):
            rs["direct"].append(snbuf(args, "direct", args.disk, bs, 1, ("--persist-every", "end")))
            rs["psync"].append(fio(args, args.disk, "psync", bs, 1, ("--direct=1",)))
            rs["uring"].append(snbuf(args, "uring", args.disk, bs, 1, ("--persist-every", "end", "--queue-depth", "32")))
            rs["io_uring"].append(fio(args, args.disk, "io_uring", bs, 1, ("--direct=1", "--iodepth=32", "--fixedbufs=1", "--registerfiles=1")))
            rs["libaio"].append(fio(args, args.disk, "libaio", bs, 1, ("--direct=1", "--iodepth=32")))
        g = {k: median_of(v)[0] for k, v in rs.items()}
        r = {k: median_of(v)[1] for k, v in rs.items()}
        if bs == 4096:
            # At 4 KiB the figure of merit is the request rate (Mops/s).
            out(f"| 4 KiB (Mops/s) | {r['direct']:.4f} | {r['uring']:.4f} | {r['psync']:.4f} | {r['libaio']:.4f} | {r['io_uring']:.4f} "
                f"| {r['direct'] / r['psync']:.3f} | {r['uring'] / r['io_uring']:.3f} | {r['direct'] / r['io_uring']:.3f} |")
        else:
            out(f"| {human_bs(bs)} (GiB/s) | {g['direct']:.3f} | {g['uring']:.3f} | {g['psync']:.3f} | {g['libaio']:.3f} | {g['io_uring']:.3f} "
                f"| {g['direct'] / g['psync']:.3f} | {g['uring'] / g['io_uring']:.3f} | {g['direct'] / g['io_uring']:.3f} |")
    out()

    out("Durable per write: snbuf `--persist-every op` (fdatasync after each block) vs fio psync `direct=1 fdatasync=1`.")
    out()
    out("| block | snbuf direct | fio psync fdatasync=1 | ratio |")
    out("|---|---|---|---|")
    for bs in (4096, 1 << 20):
        a, b = [], []
        for _ in range(args.rounds):
            a.append(snbuf(args, "direct", args.disk, bs, 1))
            b.append(fio(args, args.disk, "psync", bs, 1, ("--direct=1", "--fdatasync=1")))
        (ga, ra), (gb, rb) = median_of(a), median_of(b)
        out(f"| {human_bs(bs)} | {ra * 1e3:.2f} kops/s, {ga:.3f} GiB/s | {rb * 1e3:.2f} kops/s, {gb:.3f} GiB/s | {ra / rb:.3f} |")
    out()
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
