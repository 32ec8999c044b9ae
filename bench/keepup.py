#!/usr/bin/env python3
"""The recorder's keep-up rate beside the raw medium (see keepup.sh and BENCHMARKS.md).

For each method, `--repeat` times: fio's best O_DIRECT write on the disk, the keep-up bisection,
`snbuf bench write` with the same method, chunk size and writers, and fio again. The disk here
drifts by tens of percent within minutes, so every ratio is taken within one repeat (to the mean
of the fio runs around it) and the summary gives the median over repeats. fio's best is a 1 GiB
file written over and over without a flush; a second fio run writes as the recorder does (a fresh
file per link, fdatasync every 8 MiB), to show what durability on fresh files costs the disk.

`--disk` may be repeated, one directory per device (the papers' non-interleaved mode): record
then gets one `--output` on each and spreads its links over them, and fio and `bench write` run
on each disk alone and are summed, so the ratios compare the recorder with the sum of the
devices' rates.

CPU is reported split the way the recorder measures it (thread CPU clocks over the recording):
the link emulation (ingest) and the writers (copy, checksum, persist; with the process's other
threads over the window, chiefly io_uring's kernel workers, which write for them); beside it, what fio itself
spends per GiB on the same disk (its usr+sys), the kernel's share of any O_DIRECT writer, and
what `snbuf bench write` spends per GiB with the same method, chunk size and threads (its threads'
CPU clocks): on memory (`nt`), the writers' target is at most 1.3x that.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

GIB = 1 << 30
MEMORY_METHODS = ("nt", "clwb", "clflushopt", "clflush", "msync", "pmdk")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def window(args, on_memory):
    """(buffer, pre, post): the window is several times the buffer (6.5x on disk by default, 6x
    on memory), so DRAM cannot hide a medium that falls behind. On memory it is shorter (it must
    fit in RAM at GB/s)."""
    if on_memory:
        return "200ms", "100ms", "1100ms"
    return args.buffer, args.pre, args.post


def targets_of(args, method):
    """Where `method` writes: /dev/shm for memory methods, else every --disk."""
    return [args.shm] if method in MEMORY_METHODS else args.disk


def label(targets):
    return " + ".join(targets)


def probe(args, method, targets, rate_total, n):
    """One fixed-length recording at `rate_total` bytes/s, with an output on each target;
    returns its summary (record --json)."""
    outs = [tempfile.mkdtemp(prefix="keepup-", dir=t) for t in targets]
    js = os.path.join(outs[0], "summary.json")
    buffer, pre, post = window(args, method in MEMORY_METHODS)
    cmd = [args.snbuf, "record", "--links", str(args.links), "--rate-per-link", f"{rate_total / args.links:.0f}",
           "--buffer", buffer, "--pre", pre, "--post", post, "--trigger-after", "600ms",
           "--method", method, "--burst-id", f"p{n}", "--json", js]
    for out in outs:
        cmd += ["--output", out]
    if args.writers:
        cmd += ["--writers", str(args.writers)]
    if args.cpus:
        cmd += ["--cpus", args.cpus]
    r = run(cmd)
    try:
        rep = json.load(open(js)) if os.path.exists(js) else None
    finally:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)
    if rep is None:
        sys.exit(f"keepup: snbuf record failed at {rate_total / 1e6:.0f} MB/s:\n{r.stderr.strip()}")
    # An output without room for the whole window cuts it, and counts the rest lost: that loss
    # says how big the target is, not how fast.
    rep["window_cut"] = rep.get("window_cut_to_bytes_per_link") is not None
    return rep


def seconds(text):
    for unit, scale in (("ms", 1e-3), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def clean(rep, args):
    """No frame lost, and the links ran at their set rate. The emulator keeps an absolute
    schedule: if it was never more than L behind from the trigger on, every frame of a window of
    length W was produced within W + L, so the input was at least W / (W + L) of the set rate.
    `--max-source-lag` bounds L as a share of W (default 2.5%: at least 97.5% of the rate);
    beyond that the probe proves nothing. Frames the emulator skipped before the trigger matter
    only inside the window, where they are counted lost."""
    _, pre, post = window(args, rep["method"] in MEMORY_METHODS)
    window_s = seconds(pre) + seconds(post)
    return rep["lost_frames"] == 0 and rep["source_max_lag_s"] <= args.max_source_lag * window_s


def keep_up(args, method, targets, start):
    """Doubles the rate from `start` until a recording loses frames, then bisects. Returns
    (keep-up rate, summary of the fastest clean probe, whether the emulator ever fell behind,
    the writer threads record ran: --writers or its own default, as its summary says)."""
    rate, ok, bad, probes = start, None, None, []
    while rate < 64e9:
        rep = probe(args, method, targets, rate, len(probes))
        probes.append((rate, rep))
        say(method, targets, rate, rep)
        if clean(rep, args):
            ok = rate
        else:
            bad = rate
        if ok is None:
            if rate / 2 < args.floor:
                break
            rate /= 2  # lost frames at the first rate tried: halve until a recording is clean
        elif bad is None:
            rate *= 2
        else:
            break
    for _ in range(args.steps):
        if ok is None or bad is None:
            break
        rate = (ok + bad) / 2
        rep = probe(args, method, targets, rate, len(probes))
        probes.append((rate, rep))
        say(method, targets, rate, rep)
        if clean(rep, args):
            ok = rate
        else:
            bad = rate
    best = max((p for p in probes if clean(p[1], args)), key=lambda p: p[0], default=None)
    # Limited by the emulation, not the medium: a probe lost nothing but failed because the links
    # ran behind their schedule.
    source_limited = any(p[1]["lost_frames"] == 0 and not clean(p[1], args) for p in probes)
    if any(p[1]["window_cut"] for p in probes):
        print(f"keepup: {label(targets)} had no room for the window at some rates: make it bigger or --post shorter",
              file=sys.stderr)
    return ok or 0.0, best[1] if best else None, source_limited, probes[0][1]["writers"]


def say(method, targets, rate, rep):
    print(f"  {method} on {label(targets)}: {rate / 1e6:8.0f} MB/s -> lost {rep['lost_frames']}, "
          f"output {rep['output_bytes_per_s'] / 1e6:.0f} MB/s, source late by up to {rep['source_max_lag_s'] * 1e3:.0f} ms"
          f"{', skipped ' + str(rep['skipped_at_source_per_link']) if rep['skipped_at_source_per_link'] else ''}"
          f"{', window cut: an output had no room for it' if rep['window_cut'] else ''}",
          file=sys.stderr, flush=True)


def summed(runs):
    """Runs on several disks, each alone, as one: (sum of their bytes/s, CPU core-s per GiB over
    all of them). Each ran for the same time, so bytes weigh in proportion to the rates; a run
    that moved nothing (fio failed there) adds nothing, not its undefined CPU per GiB."""
    rate = sum(r for r, _ in runs)
    cpu = sum(r * c for r, c in runs if r) / rate if rate else float("nan")
    return rate, cpu


def bench_write(args, method, targets, block, threads):
    """`snbuf bench write` on each target alone, the writers shared out as record shares them,
    summed: (bytes/s, its threads' CPU core-s per GiB)."""
    each = max(1, threads // len(targets))
    return summed([bench_write_one(args, method, t, block, each) for t in targets])


def bench_write_one(args, method, target, block, threads):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [args.snbuf, "bench", "write", "--target", target, "--method", method, "--block-size", str(block),
               "--threads", str(threads), "--duration", "2s", "--region", "1GiB", "--json", f.name]
        if args.cpus:
            # The writers' CPUs only: the first CPU of the list runs the link emulation.
            writers = args.cpus.split(",", 1)[1] if "," in args.cpus else args.cpus
            cmd += ["--cpus", writers]
        r = run(cmd)
        if r.returncode != 0:
            sys.exit(f"keepup: bench write failed: {r.stderr.strip()}")
        r = json.load(open(f.name))["results"][0]
        return r["gib_per_s"] * GIB, r["cpu_core_s_per_gib"]


def fio_job(directory, *options):
    """One fio run of 1 MiB O_DIRECT sequential writes in a fresh directory under `directory`;
    its (group-reported) job from the JSON output, or None if fio failed."""
    with tempfile.TemporaryDirectory(dir=directory, prefix="keepup-fio-") as d:
        r = run(["fio", "--name=k", f"--directory={d}", "--direct=1", "--rw=write", "--bs=1m",
                 "--group_reporting", "--output-format=json", *options])
        if r.returncode != 0 or "{" not in r.stdout:
            return None
        return json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]


def fio_best(directories):
    """fio's best on each disk alone, summed: (bytes/s, fio's own CPU core-seconds per GiB,
    engines)."""
    each = [fio_best_one(d) for d in directories]
    rate, cpu = summed([(r, c) for r, c, _ in each])
    return rate, cpu, "+".join(e for _, _, e in each)


def fio_best_one(directory):
    """fio's best 1 MiB O_DIRECT sequential write (psync, libaio or io_uring at iodepth 32) on the
    disk: (bytes/s, fio's own CPU core-seconds per GiB in that run, engine)."""
    best = (0.0, float("nan"), "none")
    for engine, extra in (("psync", []), ("libaio", ["--iodepth=32"]), ("io_uring", ["--iodepth=32"])):
        job = fio_job(directory, f"--ioengine={engine}", "--size=1g", "--time_based", "--runtime=2",
                      "--ramp_time=0.5", *extra)
        if job is None:
            continue
        bw = job["write"]["bw_bytes"]
        cpu_s = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
        gib = job["write"]["io_bytes"] / GIB
        if bw > best[0]:
            best = (bw, cpu_s / gib if gib else float("nan"), engine)
    return best


def fio_recorder_pattern(args, directories):
    """fio doing what the recorder does to the disks: one fresh file per link (the links spread
    over the disks as record spreads them), 1 MiB O_DIRECT writes, fdatasync every 8 (the
    recorder's default persist group), 4 GiB in all; on each disk alone, summed. Bytes/s."""
    n = len(directories)
    links = [args.links // n + (i < args.links % n) for i in range(n)]
    return sum(fio_recorder_pattern_one(args, d, k) for d, k in zip(directories, links) if k)


def fio_recorder_pattern_one(args, directory, links):
    """The best of psync and io_uring (iodepth 8) for `links` files on one disk: bytes/s over
    all its jobs."""
    best = 0.0
    for engine, extra in (("psync", []), ("io_uring", ["--iodepth=8"])):
        job = fio_job(directory, f"--ioengine={engine}", f"--size={4096 // args.links}m",
                      f"--numjobs={links}", "--fdatasync=8", "--end_fsync=1", *extra)
        if job is not None:
            best = max(best, job["write"]["bw_bytes"])
    return best


def measure(args, method, chunk):
    """One repeat for one method: a dict of everything measured."""
    on_memory = method in MEMORY_METHODS
    targets = targets_of(args, method)
    fio_before = None if on_memory else fio_best(targets)
    start = args.start or (args.shm_start if on_memory else 0.5 * fio_before[0])
    rate, best, source_limited, writers = keep_up(args, method, targets, start)
    bw, bw_cpu = bench_write(args, method, targets, chunk, writers)
    fio_after = None if on_memory else fio_best(targets)
    fio_pattern = None if on_memory else fio_recorder_pattern(args, targets)
    m = {"method": method, "writers": writers, "target": label(targets), "targets": targets,
         "keep_up_bytes_per_s": rate, "source_limited": source_limited,
         "bench_write_bytes_per_s": bw, "keep_up_over_bench_write": rate / bw,
         "bench_write_core_s_per_gib": bw_cpu}
    if best:
        gib = best["frames_recorded"] * best["frame_bytes"] / GIB
        # The writers' side includes the process's other threads over the window: io_uring's
        # kernel workers write for them (the main thread, polling every 20 ms, is noise).
        other = best.get("other_cpu_s", 0.0)
        m.update(cpu_core_s_per_gib=best["cpu_core_s_per_gib"], emulation_core_s_per_gib=best["source_cpu_s"] / gib,
                 writers_core_s_per_gib=(best["writer_cpu_s"] + other) / gib,
                 writer_threads_core_s_per_gib=best["writer_cpu_s"] / gib, other_threads_core_s_per_gib=other / gib)
        m.update(writers_over_bench_write_cpu=m["writers_core_s_per_gib"] / bw_cpu)
    if best and args.crc_core_s_per_gib:
        m.update(writers_over_bare_crc=m["writers_core_s_per_gib"] / args.crc_core_s_per_gib)
    if fio_before:
        fio = (fio_before[0] + fio_after[0]) / 2
        m.update(fio_before_bytes_per_s=fio_before[0], fio_after_bytes_per_s=fio_after[0], fio_bytes_per_s=fio,
                 keep_up_over_fio=rate / fio, fio_engines=[fio_before[2], fio_after[2]],
                 fio_core_s_per_gib=statistics.mean([fio_before[1], fio_after[1]]),
                 fio_recorder_pattern_bytes_per_s=fio_pattern, keep_up_over_fio_recorder_pattern=rate / fio_pattern)
        if best:
            m.update(writers_over_fio_cpu=m["writers_core_s_per_gib"] / m["fio_core_s_per_gib"])
    return m


def bare_crc(args):
    """Core-seconds per GiB of one CRC-32C pass over bytes streamed from DRAM (the recorder's
    implementation, `snbuf bench checksum`): the floor for a writer that reads each byte once."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = run([args.snbuf, "bench", "checksum", "--json", f.name])
        if r.returncode != 0:
            sys.exit(f"keepup: bench checksum failed: {r.stderr.strip()}")
        for x in json.load(open(f.name))["results"]:
            if x["variant"].startswith("crc-fast") and x["source"] == "dram":
                return x["core_s_per_gib"]
    return None


def fmt_gib(x):
    return f"{x / GIB:.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snbuf", required=True)
    p.add_argument("--disk", action="append",
                   help="a directory on the disk (default /var/tmp); repeat it for several devices: record gets "
                        "an --output on each, fio and bench write run on each alone and are summed")
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--links", type=int, default=10)
    p.add_argument("--buffer", default="1s", help="latency buffer on disk (default 1s)")
    p.add_argument("--pre", default="500ms")
    p.add_argument("--post", default="6s")
    p.add_argument("--start", type=float, default=0.0,
                   help="first total rate to try, bytes/s (default: half of fio's on disk, --shm-start on memory)")
    p.add_argument("--shm-start", type=float, default=2e9)
    p.add_argument("--max-source-lag", type=float, default=0.025,
                   help="a probe counts only if the link emulation was never later than this share of the window (default 0.025)")
    p.add_argument("--floor", type=float, default=50e6, help="give up below this rate, bytes/s")
    p.add_argument("--steps", type=int, default=4, help="bisection steps after the first loss")
    p.add_argument("--writers", type=int, default=0,
                   help="writer threads (default: record's own, as its summary reports)")
    p.add_argument("--cpus", default="", help="passed to record (first CPU: links, the rest: writers)")
    p.add_argument("--methods", default="direct,uring,nt")
    p.add_argument("--repeat", type=int, default=3, help="measure each method this many times")
    p.add_argument("--json", default="", help="the raw result (default: bench/results/keepup/<date>-<host>.json)")
    p.add_argument("--quick", action="store_true", help="one repeat, 2 bisection steps, 3 s after the trigger")
    args = p.parse_args()
    args.disk = args.disk or ["/var/tmp"]
    if args.quick:
        args.steps, args.post, args.repeat = 2, "3s", 1
    # The recorder's default chunk for 5568 B frames: 128 frames, whole 4 KiB blocks
    # (crates/unit/src/chunk_cuts.rs), so bench write moves the same requests.
    chunk = 128 * 5568
    args.crc_core_s_per_gib = bare_crc(args)
    writers_label = args.writers or "record's default number of"
    print(f"Disk: buffer {args.buffer}, window {args.pre} before to {args.post} after the trigger. "
          f"Memory: buffer 200ms, window 100ms before to 1100ms after. {args.links} links of 5568 B frames, "
          f"{writers_label} writer threads{', CPUs ' + args.cpus if args.cpus else ''}; "
          f"{args.steps} bisection steps; {args.repeat} repeat(s). A bare CRC-32C pass from DRAM: "
          f"{args.crc_core_s_per_gib:.3f} core-s/GiB.")
    if len(args.disk) > 1:
        print(f"Disks {label(args.disk)}: fio and bench write on each alone, summed.")
    print()
    print("| method | target | repeat | keep-up | bench write | ratio | fio best (before / after) | ratio "
          "| fio, recorder's pattern | ratio | CPU core-s/GiB: total (links + writers) | fio's own CPU core-s/GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for method in args.methods.split(","):
        for k in range(args.repeat):
            m = measure(args, method, chunk)
            m["repeat"] = k + 1
            results.append(m)
            note = " (source-limited)" if m["source_limited"] else ""
            fio = (f"{fmt_gib(m['fio_bytes_per_s'])} ({fmt_gib(m['fio_before_bytes_per_s'])} / "
                   f"{fmt_gib(m['fio_after_bytes_per_s'])}) | {m['keep_up_over_fio']:.2f} | "
                   f"{fmt_gib(m['fio_recorder_pattern_bytes_per_s'])} | {m['keep_up_over_fio_recorder_pattern']:.2f}"
                   if "fio_bytes_per_s" in m else "n/a | n/a | n/a | n/a")
            cpu = (f"{m['cpu_core_s_per_gib']:.2f} ({m['emulation_core_s_per_gib']:.2f} + {m['writers_core_s_per_gib']:.2f})"
                   if "cpu_core_s_per_gib" in m else "n/a")
            fio_cpu = f"{m['fio_core_s_per_gib']:.2f}" if "fio_core_s_per_gib" in m else "n/a"
            print(f"| {method} ({m['writers']} writers) | {m['target']} | {k + 1} | {fmt_gib(m['keep_up_bytes_per_s'])} GiB/s{note} "
                  f"| {fmt_gib(m['bench_write_bytes_per_s'])} GiB/s | {m['keep_up_over_bench_write']:.2f} | {fio} "
                  f"| {cpu} | {fio_cpu} |", flush=True)
    print()
    print("Medians over repeats:")
    print()
    print("| method | keep-up / bench write | keep-up / fio best | keep-up / fio, recorder's pattern "
          "| CPU core-s/GiB (links + writers) | fio's own CPU core-s/GiB | writers / fio CPU "
          "| writers / bench write CPU | writers / bare CRC |")
    print("|---|---|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        ms = [m for m in results if m["method"] == method]

        def med(key):
            xs = [m[key] for m in ms if key in m]
            return statistics.median(xs) if xs else None

        def show(key, f="{:.2f}"):
            v = med(key)
            return f.format(v) if v is not None else "n/a"

        print(f"| {method} | {show('keep_up_over_bench_write')} | {show('keep_up_over_fio')} | "
              f"{show('keep_up_over_fio_recorder_pattern')} | "
              f"{show('cpu_core_s_per_gib')} ({show('emulation_core_s_per_gib')} + {show('writers_core_s_per_gib')}) "
              f"| {show('fio_core_s_per_gib')} | {show('writers_over_fio_cpu')} | {show('writers_over_bench_write_cpu')} "
              f"| {show('writers_over_bare_crc')} |")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import keep
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    path = args.json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "keepup",
                                     f"{date}-{platform.node()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"suite": "keepup", "date": date,
                   "command": "bench/keepup.sh " + " ".join(sys.argv[3:]),
                   "machine": keep.machine(), "config": vars(args), "results": results}, f, indent=1)
        f.write("\n")
    print(f"\nwrote {path}; python3 bench/tables.py puts it in BENCHMARKS.md")


if __name__ == "__main__":
    main()
