#!/usr/bin/env python3
"""Network ingest's loss-free rate and CPU beside iperf3 and one bare copy, in the same run
(see ingest.sh, BENCHMARKS.md).

snbuf: `snbuf record --source udp://127.0.0.1:PORT` fed by `snbuf emit` (WIBEth frames, one per
7200-byte datagram, several links on one port) records a window; a probe is clean when the
burst lost no frame and the receiver counted no kernel drop, gap or refused datagram over the
whole run, and the sender kept its schedule. Two modes: `gro` (emit batches each link's frames
into UDP_SEGMENT sends, the receiver takes coalesced buffers with UDP_GRO: the default) and
`plain` (`emit --gso off`, `record --gro off`: one datagram per system call's message on both
sides, as before GRO). iperf3: `iperf3 -u -l 7200` between two processes on the same loopback,
clean when its receiver reports 0 datagrams lost and received at least 97.5% of the rate asked
(a sender that cannot reach a rate loses nothing, but proves nothing either). Each is bisected
to its highest clean total rate, in turns so that all see the same machine, and ratios are
taken within each repeat; the summary gives medians over repeats.

CPU, each over one interval: the receive thread's CPU against the bytes it received over the
same interval (record --json's source_cpu_core_s_per_gib); the whole unit from UDP to durable
(unit_cpu_core_s_per_gib) in a probe at a fixed rate that persists to a disk (--disk, method
auto); the sender's thread per GiB sent; and one bare memcpy pass over DRAM (`snbuf bench
checksum`, regular stores as the kernel's copy to user space does): the floor for ingest's one
copy. The first probe above each loss-free rate says which side failed: the sender (behind its
schedule) or the receiver (frames lost).

The receiver's nap (it sleeps up to --receive-nap's default after reading every socket empty) against none
(`record --receive-nap off`), GRO on, at two fixed rates to --output: the detector's own (WIBEth,
219.7 MB/s a link) and the whole-unit probe's. The two go in turns, in an order that alternates
by repeat; each gives the receive thread's CPU per GiB and the frames each receive carried.

The raw result goes to bench/results/ingest/<date>-<host>.json (or --json); bench/tables.py makes
BENCHMARKS.md's table from it.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
FRAME = 7200


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def iperf3_udp(rate_total, seconds, window):
    """`iperf3 -u -l 7200` between two processes on loopback at `rate_total` bytes/s for
    `seconds`, with `window` of socket buffer (-w sets both ends'): what its receiver got, lost,
    and spent (core-seconds per GiB, from its own report). Exits if iperf3 fails."""
    port = free_port(socket.SOCK_STREAM)
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        r = subprocess.run(["iperf3", "-u", "-c", "127.0.0.1", "-p", str(port), "-l", str(FRAME),
                            "-b", f"{rate_total * 8:.0f}", "-t", str(seconds), "-w", window, "--json"],
                           capture_output=True, text=True, timeout=seconds + 30)
        rep = json.loads(r.stdout)
    finally:
        server.kill()
        server.wait()
    if "error" in rep:
        sys.exit(f"ingest: iperf3 failed: {rep['error']}")
    end = rep["end"]["sum_received"]
    cpu = rep["end"]["cpu_utilization_percent"]["remote_total"] / 100 * end["seconds"]
    return {
        "received_bytes_per_s": end["bytes"] / end["seconds"],
        "receiver_cpu_core_s_per_gib": cpu / (end["bytes"] / GIB) if end["bytes"] else None,
        "lost_datagrams": end.get("lost_packets", 1),
        "datagrams": end.get("packets", 0),
    }


def iperf3_probe(args, rate_total):
    """iperf3 -u at `rate_total` bytes/s for --seconds; returns (clean, received bytes/s)."""
    # The same socket buffer as snbuf's receiver.
    got = iperf3_udp(rate_total, args.seconds, args.rcvbuf.replace("iB", ""))
    received, lost = got["received_bytes_per_s"], got["lost_datagrams"]
    clean = lost == 0 and got["datagrams"] > 0 and received >= 0.975 * rate_total
    if args.verbose:
        print(f"  iperf3 probe {rate_total / GIB:.2f} GiB/s: {'clean' if clean else 'NOT clean'}; "
              f"received {received / GIB:.2f} GiB/s, lost {lost}", file=sys.stderr, flush=True)
    return clean, {"received": received, "receiver_cpu_core_s_per_gib": got["receiver_cpu_core_s_per_gib"]}


PRE_S = 0.5
BUFFER_S = 0.75
#: The most of the memory available at the start that a probe's latency buffers and, on a
#: RAM-backed output (/dev/shm), its window may take.
MEMORY_SHARE = 0.5


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def window_post_s(args, rate_total, output):
    """How long after the trigger a probe records: --seconds less the time before the trigger,
    shortened where the buffers and a window on RAM (tmpfs) would pass MEMORY_SHARE of the
    memory available (at 5 GiB/s a 3 s window is 15 GiB of /dev/shm): never below 0.25 s, and a
    probe that cannot fit even that is refused."""
    post = max(args.seconds - 1.5, 0.5)
    on_ram = subprocess.run(["stat", "-f", "-c", "%T", output], capture_output=True,
                            text=True, timeout=10).stdout.strip() in ("tmpfs", "ramfs")
    budget = MEMORY_SHARE * args.mem_available - rate_total * BUFFER_S
    if on_ram:
        post = min(post, budget / rate_total - PRE_S)
    elif budget < 0:
        post = -1
    if post < 0.25:
        sys.exit(f"ingest: a probe at {rate_total / GIB:.2f} GiB/s needs more memory than "
                 f"{MEMORY_SHARE:.0%} of the {args.mem_available / GIB:.1f} GiB available: lower --max-rate")
    return post


MODES = {"gro": (["--gro", "on"], ["--gso", "on"]), "plain": (["--gro", "off"], ["--gso", "off"])}


def snbuf_probe(args, rate_total, n, mode, output=None, method=None, record_extra=()):
    """emit -> record --source udp at `rate_total` bytes/s; returns (clean, summary), the summary
    with `why` (what made the probe unclean) and the sender's CPU."""
    port = free_port(socket.SOCK_DGRAM)
    out = tempfile.mkdtemp(prefix="ingest-", dir=output or args.output)
    js = os.path.join(out, "summary.json")
    emit_js = os.path.join(out, "emit.json")
    per_link = f"{rate_total / args.links:.0f}"
    post_s = window_post_s(args, rate_total, output or args.output)
    cmd = [args.snbuf, "record", "--source", f"udp://127.0.0.1:{port}", "--frame", "wibeth",
           "--links", str(args.links), "--rate-per-link", per_link, "--buffer", f"{BUFFER_S}s",
           "--pre", f"{PRE_S}s", "--post", f"{post_s:.3f}s",
           "--trigger-after", "1s", "--method", method or args.method, "--output", out,
           "--burst-id", f"p{n}", "--json", js, "--rcvbuf", args.rcvbuf]
    cmd += ["--cpus", args.cpus] + MODES[mode][0] + list(record_extra)
    recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    # The sender runs until the recorder is done (however long its files take to prepare).
    emit = subprocess.Popen([args.snbuf, "emit", "--to", f"udp://127.0.0.1:{port}",
                             "--links", str(args.links), "--frame", "wibeth",
                             "--rate-per-link", per_link, "--json", emit_js, "--cpu", str(args.emit_cpu)]
                            + MODES[mode][1],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, err = recorder.communicate(timeout=args.seconds + 120)
        rep = json.load(open(js)) if os.path.exists(js) else None
        emit.send_signal(2)  # Ctrl-C: the sender writes its summary and stops
        emit.wait(timeout=30)
        sent = json.load(open(emit_js)) if os.path.exists(emit_js) else None
    finally:
        for p in (emit, recorder):
            p.kill()
            p.wait()
        shutil.rmtree(out, ignore_errors=True)
    # The sender kept its schedule (it fell less than 2.5% of the probe behind), so the input was
    # the rate asked; beyond that the probe proves nothing.
    on_schedule = sent is not None and sent["max_lag_s"] <= 0.025 * args.seconds
    if rep is None:
        sys.exit(f"ingest: snbuf record failed at {rate_total / 1e6:.0f} MB/s:\n{err.strip()}")
    ingest = rep.get("ingest") or []
    trouble = sum(l["kernel_drops"] + l["timestamp_gap_frames"] + l["sequence_gap_frames"]
                  + sum(l["dropped"].values()) for l in ingest)
    clean = on_schedule and rep["lost_frames"] == 0 and trouble == 0 and rep["frames_recorded"] > 0
    # What made the probe unclean: the sender, the receiver, or both (named so that the side
    # that limits is read from the first probe above the loss-free rate).
    lost = rep["lost_frames"] > 0 or trouble > 0
    rep["why"] = None if clean else " and ".join(
        w for w, bad in (("sender behind its schedule", not on_schedule), ("receiver lost frames", lost)) if bad)
    rep["emit_cpu_core_s_per_gib"] = (sent["cpu_s"] / (sent["bytes_per_s"] * sent["seconds"] / GIB)
                                      if sent and sent["bytes_per_s"] > 0 else None)
    rep["emit_gso"] = sent.get("gso") if sent else None
    if args.verbose:
        flat = [{**{k: v for k, v in l.items() if k != "dropped"}, **l["dropped"]} for l in ingest]
        kinds = {k: sum(l[k] for l in flat) for k in flat[0]} if flat else {}
        print(f"  snbuf {mode} probe {rate_total / GIB:.2f} GiB/s: {'clean' if clean else 'NOT clean'}; "
              f"sender {sent['max_lag_s'] * 1e3 if sent else -1:.0f} ms behind; lost {rep['lost_frames']}; "
              f"ingest {({k: v for k, v in kinds.items() if v and k not in ('frames', 'bytes')})}",
              file=sys.stderr, flush=True)
    return clean, rep


# WIBEth's own rate per link, bytes/s: 7200 B every 2048 ticks of 62.5 MHz.
WIBETH_LINK_RATE = FRAME * 62.5e6 / 2048
NAPS = {"auto": ["--receive-nap", "auto"], "off": ["--receive-nap", "off"]}


def nap_probes(args, rates, k, n):
    """GRO probes at each of `rates` with the receiver's nap and without, in an order that
    alternates by repeat `k`; per rate, each one's receive CPU, frames per receive and cleanness."""
    out = []
    for rate in rates:
        row = {"bytes_per_s": rate}
        for nap in (list(NAPS) if k % 2 == 0 else list(NAPS)[::-1]):
            n[0] += 1
            _, rep = snbuf_probe(args, rate, n[0], "gro", record_extra=NAPS[nap])
            ingest = rep.get("ingest") or []
            frames = sum(l["frames"] for l in ingest)
            receives = sum(l.get("receives", 0) for l in ingest)
            row[nap] = {
                "clean": rep.get("why") is None,
                "why": rep.get("why"),
                "lost_frames": rep.get("lost_frames"),
                "receive_cpu_core_s_per_gib": rep.get("source_cpu_core_s_per_gib"),
                "frames_per_receive": frames / receives if receives else None,
                "nap_s": rep.get("ingest_nap_s"),
            }
        auto, off = row["auto"]["receive_cpu_core_s_per_gib"], row["off"]["receive_cpu_core_s_per_gib"]
        row["off_over_auto_receive_cpu"] = off / auto if auto and off else None
        out.append(row)
    return out


def bisect(probe, lo, hi, steps):
    """The highest clean rate in [lo, hi] to within 2^-steps of hi (lo assumed clean unless it
    is not, then halved until it is); returns (rate, its probe's info, the info of the lowest
    unclean probe above it)."""
    best, above = None, None
    while lo > 1e6:
        ok, info = probe(lo)
        if ok:
            best = (lo, info)
            break
        above = info
        lo /= 2
    if best is None:
        return 0.0, None, above
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok, info = probe(mid)
        if ok:
            lo, best = mid, (mid, info)
        else:
            hi, above = mid, info
    return best[0], best[1], above


def memcpy_floor(args):
    """Core-seconds per GiB of one plain memcpy pass over DRAM (`snbuf bench checksum`)."""
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "checksum.json")
        subprocess.run([args.snbuf, "bench", "checksum", "--dram-size", "256MiB", "--json", js],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        rep = json.load(open(js))
    for r in rep["results"]:
        if r["variant"].startswith("plain memcpy") and r["source"] == "dram":
            return r["core_s_per_gib"], rep["machine"]
    sys.exit("ingest: snbuf bench checksum has no plain memcpy variant")


def bytes_of(size):
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if size.endswith(unit):
            return int(float(size[: -len(unit)]) * scale)
    return int(size)


def raise_socket_limits(need):
    """iperf3 sets its buffer with SO_RCVBUF, which net.core.rmem_max caps (snbuf, as root, uses
    SO_RCVBUFFORCE). Both must get the same buffer: raise the caps for the run, as root, and
    return what to restore."""
    saved = {}
    for key in ("rmem_max", "wmem_max"):
        path = f"/proc/sys/net/core/{key}"
        try:
            old = int(open(path).read())
            if old < need:
                open(path, "w").write(str(need))
                saved[path] = old
        except OSError as e:
            print(f"ingest: cannot raise {path} to {need} ({e}): iperf3 gets the kernel's cap", file=sys.stderr)
    return saved


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snbuf", required=True)
    p.add_argument("--links", type=int, default=4)
    p.add_argument("--seconds", type=float, default=4.0, help="length of each probe")
    p.add_argument("--method", default="nt")
    p.add_argument("--output", default="/dev/shm")
    p.add_argument("--modes", default="gro,plain", help="which of gro, plain to bisect")
    p.add_argument("--disk", default="/var/tmp",
                   help="where the whole-unit probe persists, with --method auto (a disk)")
    p.add_argument("--unit-rate", type=float, default=None,
                   help="total bytes/s of the whole-unit probe to --disk (default: 90%% of the lowest "
                        "loss-free rate of the modes in that repeat, the same for every mode)")
    p.add_argument("--rcvbuf", default="32MiB")
    p.add_argument("--cpus", default=None,
                   help="the recorder's CPUs (default: every CPU but the sender's, which is the last)")
    p.add_argument("--max-rate", type=float, default=4e9, help="top of the bisection, bytes/s")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None,
                   help="the raw result (default: bench/results/ingest/<date>-<host>.json)")
    p.add_argument("--verbose", action="store_true", help="say why each probe was or was not clean")
    args = p.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    args.emit_cpu = allowed[-1]
    if args.cpus is None:
        args.cpus = ",".join(str(c) for c in (allowed[:-1] or allowed))
    args.mem_available = mem_available() or 8 * GIB
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in MODES:
            sys.exit(f"ingest: --modes {m}: one of {', '.join(MODES)}")
    args.command = "bench/ingest.sh " + " ".join(sys.argv[1:][2:] if sys.argv[1:2] == ["--snbuf"] else sys.argv[1:])
    saved = raise_socket_limits(2 * bytes_of(args.rcvbuf))
    try:
        run_repeats(args)
    finally:
        for path, old in saved.items():
            open(path, "w").write(str(old))


def run_repeats(args):
    repeats = []
    machine = None
    for k in range(args.repeat):
        floor, machine = memcpy_floor(args)
        ip_rate, ip, _ = bisect(lambda r: iperf3_probe(args, r), args.max_rate / 4, args.max_rate, args.steps)
        row = {
            "memcpy_core_s_per_gib": floor,
            "iperf3_loss_free_bytes_per_s": ip_rate,
            "iperf3_receiver_cpu_core_s_per_gib": ip["receiver_cpu_core_s_per_gib"] if ip else None,
        }
        n = [0]
        for mode in args.modes:
            def sp(r, mode=mode):
                n[0] += 1
                return snbuf_probe(args, r, n[0], mode)

            rate, rep, above = bisect(sp, args.max_rate / 8, args.max_rate, args.steps)
            ingest = (rep or {}).get("ingest") or []
            frames = sum(l["frames"] for l in ingest)
            receives = sum(l.get("receives", 0) for l in ingest)
            row[mode] = {
                "loss_free_bytes_per_s": rate,
                "ratio_to_iperf3": rate / ip_rate if ip_rate else None,
                "receive_cpu_core_s_per_gib": rep.get("source_cpu_core_s_per_gib") if rep else None,
                "frames_per_receive": frames / receives if receives else None,
                "emit_cpu_core_s_per_gib": rep.get("emit_cpu_core_s_per_gib") if rep else None,
                "limit_above": (above or {}).get("why"),
            }
            row[mode]["receive_cpu_over_memcpy"] = (row[mode]["receive_cpu_core_s_per_gib"] / floor
                                                   if row[mode]["receive_cpu_core_s_per_gib"] else None)
        # The whole unit, UDP to durable on a disk, every mode at the same rate.
        unit_rate = args.unit_rate or 0.9 * min(row[m]["loss_free_bytes_per_s"] for m in args.modes)
        for mode in args.modes:
            n[0] += 1
            _, unit = snbuf_probe(args, unit_rate, n[0], mode, output=args.disk, method="auto")
            row[mode]["unit_to_disk"] = {
                "bytes_per_s": unit_rate,
                "method": unit.get("method"),
                "clean": unit.get("why") is None,
                "lost_frames": unit.get("lost_frames"),
                "unit_cpu_core_s_per_gib": unit.get("unit_cpu_core_s_per_gib"),
                "receive_cpu_core_s_per_gib": unit.get("source_cpu_core_s_per_gib"),
            }
        if "gro" in args.modes:
            row["nap"] = nap_probes(args, [WIBETH_LINK_RATE * args.links, unit_rate], k, n)
        if "gro" in row and "plain" in row and row["plain"]["loss_free_bytes_per_s"]:
            row["gro_over_plain_loss_free"] = row["gro"]["loss_free_bytes_per_s"] / row["plain"]["loss_free_bytes_per_s"]
        repeats.append(row)
        line = [f"repeat {k + 1}: memcpy {floor:.3f} core-s/GiB, iperf3 {ip_rate / GIB:.2f} GiB/s"]
        for mode in args.modes:
            m = row[mode]
            line.append(f"{mode} {m['loss_free_bytes_per_s'] / GIB:.2f} GiB/s (above: {m['limit_above']}), "
                        f"receive {m['receive_cpu_core_s_per_gib'] or 0:.3f}, "
                        f"unit to disk {m['unit_to_disk']['unit_cpu_core_s_per_gib'] or 0:.3f} core-s/GiB")
        print("; ".join(line), flush=True)

    def med(*path):
        vals = []
        for r in repeats:
            v = r
            for p in path:
                if isinstance(v, list):
                    v = v[p] if isinstance(p, int) and p < len(v) else None
                else:
                    v = v.get(p) if isinstance(v, dict) else None
            if v is not None:
                vals.append(v)
        return statistics.median(vals) if vals else None

    summary = {
        "suite": "ingest",
        "schema_version": 2,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "command": args.command,
        "machine": {"hostname": platform.node(), "cpu_model": machine.get("cpu_model") if machine else None,
                    "logical_cpus": os.cpu_count(), "kernel": platform.release(),
                    "git_commit": machine.get("git_commit") if machine else None},
        "links": args.links,
        "frame_bytes": FRAME,
        "method": args.method,
        "seconds_per_probe": args.seconds,
        "repeats": repeats,
        "median": {
            "memcpy_core_s_per_gib": med("memcpy_core_s_per_gib"),
            "iperf3_loss_free_bytes_per_s": med("iperf3_loss_free_bytes_per_s"),
            "iperf3_receiver_cpu_core_s_per_gib": med("iperf3_receiver_cpu_core_s_per_gib"),
            "gro_over_plain_loss_free": med("gro_over_plain_loss_free"),
            "nap": [{"bytes_per_s": med("nap", i, "bytes_per_s"),
                     **{nap: {"receive_cpu_core_s_per_gib": med("nap", i, nap, "receive_cpu_core_s_per_gib"),
                              "frames_per_receive": med("nap", i, nap, "frames_per_receive")} for nap in NAPS},
                     "off_over_auto_receive_cpu": med("nap", i, "off_over_auto_receive_cpu")}
                    for i in range(len(repeats[0].get("nap", [])))],
            **{mode: {key: med(mode, key) for key in (
                "loss_free_bytes_per_s", "ratio_to_iperf3", "receive_cpu_core_s_per_gib",
                "receive_cpu_over_memcpy", "frames_per_receive", "emit_cpu_core_s_per_gib")}
               | {"unit_to_disk_cpu_core_s_per_gib": med(mode, "unit_to_disk", "unit_cpu_core_s_per_gib"),
                  "unit_to_disk_bytes_per_s": med(mode, "unit_to_disk", "bytes_per_s")}
               for mode in args.modes},
        },
    }
    print(json.dumps(summary["median"], indent=1))
    path = args.json
    if path is None:
        here = os.path.dirname(os.path.abspath(__file__))
        d = os.path.join(here, "results", "ingest")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{summary['date']}-{platform.node()}.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
