#!/usr/bin/env python3
"""Network ingest's loss-free rate beside iperf3's, in the same run (see ingest.sh, BENCHMARKS.md).

snbuf: `snbuf record --source udp://127.0.0.1:PORT` fed by `snbuf emit` (WIBEth frames, one per
7200-byte datagram, several links on one port) records a window; a probe is clean when the
burst lost no frame and the receiver counted no kernel drop, gap or refused datagram over the
whole run, and the sender kept its schedule. iperf3: `iperf3 -u -l 7200` between two processes on
the same loopback, clean when its receiver reports 0 datagrams lost and received at least 97.5% of
the rate asked (a sender that cannot reach a rate loses nothing, but proves nothing either). Each is bisected to its highest clean total rate, in turns
(iperf3, snbuf, iperf3, ...) so that both see the same machine, and the ratio is taken within
each repeat; the summary gives the median over repeats.

snbuf's receiver also persists what it receives (to /dev/shm with non-temporal stores by
default, so that storage is not the limit), and its receive thread's CPU time per GiB recorded
is reported: the ingest's own cost.
"""

import argparse
import json
import os
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


def iperf3_probe(args, rate_total):
    """iperf3 -u at `rate_total` bytes/s for --seconds; returns (clean, received bytes/s)."""
    port = free_port(socket.SOCK_STREAM)
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        # The same socket buffer as snbuf's receiver (-w sets both ends').
        r = subprocess.run(["iperf3", "-u", "-c", "127.0.0.1", "-p", str(port), "-l", str(FRAME),
                            "-b", f"{rate_total * 8:.0f}", "-t", str(args.seconds), "-w", args.rcvbuf.replace("iB", ""),
                            "--json"],
                           capture_output=True, text=True, timeout=args.seconds + 30)
        rep = json.loads(r.stdout)
        if "error" in rep:
            sys.exit(f"ingest: iperf3 failed: {rep['error']}")
        end = rep["end"]["sum_received"]
        lost, packets = end.get("lost_packets", 1), end.get("packets", 0)
        received = end["bytes"] / end["seconds"]
        cpu = rep["end"]["cpu_utilization_percent"]["remote_total"] / 100 * end["seconds"]
        clean = lost == 0 and packets > 0 and received >= 0.975 * rate_total
        if args.verbose:
            print(f"  iperf3 probe {rate_total / GIB:.2f} GiB/s: {'clean' if clean else 'NOT clean'}; "
                  f"received {received / GIB:.2f} GiB/s, lost {lost}", file=sys.stderr, flush=True)
        return clean, {"received": received, "receiver_cpu_core_s_per_gib": cpu / (end["bytes"] / GIB)}
    finally:
        server.kill()
        server.wait()


def snbuf_probe(args, rate_total, n):
    """emit -> record --source udp at `rate_total` bytes/s; returns (clean, summary)."""
    port = free_port(socket.SOCK_DGRAM)
    out = tempfile.mkdtemp(prefix="ingest-", dir=args.output)
    js = os.path.join(out, "summary.json")
    emit_js = os.path.join(out, "emit.json")
    per_link = f"{rate_total / args.links:.0f}"
    cmd = [args.snbuf, "record", "--source", f"udp://127.0.0.1:{port}", "--frame", "wibeth",
           "--links", str(args.links), "--rate-per-link", per_link, "--buffer", "1s",
           "--pre", "500ms", "--post", f"{max(args.seconds - 1.5, 0.5)}s",
           "--trigger-after", "1s", "--method", args.method, "--output", out,
           "--burst-id", f"p{n}", "--json", js, "--rcvbuf", args.rcvbuf]
    cmd += ["--cpus", args.cpus]
    recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    # The sender runs until the recorder is done (however long its files take to prepare).
    emit = subprocess.Popen([args.snbuf, "emit", "--to", f"udp://127.0.0.1:{port}",
                             "--links", str(args.links), "--frame", "wibeth",
                             "--rate-per-link", per_link, "--json", emit_js, "--cpu", str(args.emit_cpu)],
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
                  + l["out_of_order"] + l["short"] + l["long"] + l["bad_version"]
                  + l["unknown_stream"] + l["implausible_timestamp"] for l in ingest)
    clean = on_schedule and rep["lost_frames"] == 0 and trouble == 0 and rep["frames_recorded"] > 0
    if args.verbose:
        kinds = {k: sum(l[k] for l in ingest) for k in ingest[0]} if ingest else {}
        print(f"  snbuf probe {rate_total / GIB:.2f} GiB/s: {'clean' if clean else 'NOT clean'}; "
              f"sender {sent['max_lag_s'] * 1e3 if sent else -1:.0f} ms behind; lost {rep['lost_frames']}; "
              f"ingest {({k: v for k, v in kinds.items() if v and k not in ('frames', 'bytes')})}",
              file=sys.stderr, flush=True)
    return clean, rep


def bisect(probe, lo, hi, steps):
    """The highest clean rate in [lo, hi] to within 2^-steps of hi (lo assumed clean unless it
    is not, then halved until it is)."""
    best = None
    while lo > 1e6:
        ok, info = probe(lo)
        if ok:
            best = (lo, info)
            break
        lo /= 2
    if best is None:
        return 0.0, None
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok, info = probe(mid)
        if ok:
            lo, best = mid, (mid, info)
        else:
            hi = mid
    return best


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
    p.add_argument("--rcvbuf", default="32MiB")
    p.add_argument("--cpus", default=None,
                   help="the recorder's CPUs (default: every CPU but the sender's, which is the last)")
    p.add_argument("--max-rate", type=float, default=4e9, help="top of the bisection, bytes/s")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--verbose", action="store_true", help="say why each probe was or was not clean")
    args = p.parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    args.emit_cpu = allowed[-1]
    if args.cpus is None:
        args.cpus = ",".join(str(c) for c in (allowed[:-1] or allowed))
    saved = raise_socket_limits(2 * bytes_of(args.rcvbuf))
    try:
        run_repeats(args)
    finally:
        for path, old in saved.items():
            open(path, "w").write(str(old))


def run_repeats(args):
    repeats = []
    for k in range(args.repeat):
        ip_rate, ip = bisect(lambda r: iperf3_probe(args, r), args.max_rate / 4, args.max_rate, args.steps)
        n = [0]

        def sp(r):
            n[0] += 1
            return snbuf_probe(args, r, n[0])

        sn_rate, rep = bisect(sp, args.max_rate / 8, args.max_rate, args.steps)
        gib = (rep["frames_recorded"] * FRAME / GIB) if rep else 0
        cpu = rep["source_cpu_s"] / gib if rep and gib > 0 else None
        row = {
            "iperf3_loss_free_bytes_per_s": ip_rate,
            "snbuf_loss_free_bytes_per_s": sn_rate,
            "ratio": sn_rate / ip_rate if ip_rate else None,
            "ingest_cpu_core_s_per_gib": cpu,
            "writer_cpu_core_s_per_gib": rep["writer_cpu_s"] / gib if rep and gib > 0 else None,
            "iperf3_receiver_cpu_core_s_per_gib": ip["receiver_cpu_core_s_per_gib"] if ip else None,
            "rcvbuf_bytes": rep.get("ingest_rcvbuf_bytes") if rep else None,
        }
        repeats.append(row)
        print(f"repeat {k + 1}: iperf3 {ip_rate / GIB:.2f} GiB/s, snbuf {sn_rate / GIB:.2f} GiB/s, "
              f"ratio {row['ratio'] or 0:.2f}, ingest CPU {cpu or 0:.3f} core-s/GiB "
              f"(iperf3's receiver {row['iperf3_receiver_cpu_core_s_per_gib'] or 0:.3f})", flush=True)
    med = lambda key: statistics.median([r[key] for r in repeats if r[key] is not None] or [0])
    summary = {
        "links": args.links,
        "frame_bytes": FRAME,
        "method": args.method,
        "repeats": repeats,
        "median_ratio": med("ratio"),
        "median_iperf3_bytes_per_s": med("iperf3_loss_free_bytes_per_s"),
        "median_snbuf_bytes_per_s": med("snbuf_loss_free_bytes_per_s"),
        "median_ingest_cpu_core_s_per_gib": med("ingest_cpu_core_s_per_gib"),
        "median_iperf3_receiver_cpu_core_s_per_gib": med("iperf3_receiver_cpu_core_s_per_gib"),
    }
    print(f"median over {args.repeat}: snbuf/iperf3 loss-free {summary['median_ratio']:.2f} "
          f"({summary['median_snbuf_bytes_per_s'] / GIB:.2f} vs {summary['median_iperf3_bytes_per_s'] / GIB:.2f} GiB/s), "
          f"ingest {summary['median_ingest_cpu_core_s_per_gib']:.3f} core-s/GiB "
          f"(iperf3's receiver {summary['median_iperf3_receiver_cpu_core_s_per_gib']:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
