#!/usr/bin/env python3
"""What a unit's ingest costs where a unit lives: the whole `snbuf serve` process's CPU per GiB
received, at the detector's own rate and above, beside the floor of its one copy and iperf3's
receiver, in the same run (see ingest.sh, BENCHMARKS.md).

Each point is a number of WIBEth links and a rate per link, fed by `snbuf emit` on loopback:
1, 4 and 10 links at the detector's rate (219.7 MB/s a link), and 4 links at 0.5, 1, 2 and
4 GiB/s in all. At each, `snbuf serve --source udp://...` buffers (no trigger) in three ways:

- `gro-batch`: UDP GRO, several coalesced buffers a receive call while they come full
  (`--receive-batch 8`);
- `gro-single`: UDP GRO, one coalesced buffer a receive call (`--receive-batch 1`, the default);
- `plain`: no GRO, datagrams a `recvmmsg` (`--gro off`, `emit --gso off`).

Measured over the same interval, after a warm-up: the process's CPU (every thread, from
/proc/PID/stat) and the receive thread's (snbuf-udp), against the bytes the unit counted
received (`snbuf status`); frames per message and per receive system call; and the loss (kernel
drops, sequence and timestamp gaps, refused datagrams) over the whole run. Beside them, once a
repeat: the copy floor (`snbuf bench checksum`'s row: a cache-hot 64 KiB buffer copied into the
next 64 KiB of a ring in DRAM with regular stores, as the kernel's copy to user space does),
and at each total rate iperf3's UDP receiver (-l 7200), its CPU per GiB from its own report.

The raw result goes to bench/results/ingest_sweep/<date>-<host>.json (or --json); bench/tables.py
makes BENCHMARKS.md's table from it.
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

from ingest import FRAME, GIB, free_port, iperf3_udp, raise_socket_limits

WIBETH_RATE = 219.7e6
HZ = os.sysconf("SC_CLK_TCK")
MODES = {
    "gro-batch": (["--receive-batch", "8"], []),
    "gro-single": (["--receive-batch", "1"], []),
    "plain": (["--gro", "off"], ["--gso", "off"]),
}


def points():
    """(name, links, bytes/s per link)."""
    out = [(f"{n} link{'s' if n > 1 else ''} at the detector's rate", n, WIBETH_RATE) for n in (1, 4, 10)]
    out += [(f"4 links, {g:g} GiB/s", 4, g * GIB / 4) for g in (0.5, 1, 2, 4)]
    return out


def cpu_ticks(pid):
    """(whole process, receive thread) CPU seconds so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = (int(fields[11]) + int(fields[12])) / HZ
    rx = 0.0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                if f.read().strip() != "snbuf-udp":
                    continue
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                tf = f.read().rsplit(")", 1)[1].split()
            rx += (int(tf[11]) + int(tf[12])) / HZ
        except FileNotFoundError:
            pass
    return total, rx


def status(args, sock):
    r = subprocess.run([args.snbuf, "status", "--socket", sock, "--json"], capture_output=True, text=True,
                       timeout=10)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def totals(st):
    links = st["ingest"]["links"]
    keys = ["frames", "bytes", "receives", "receive_calls", "kernel_drops", "sequence_gap_frames",
            "timestamp_gap_frames"]
    out = {k: sum(l.get(k, 0) for l in links) for k in keys}
    out["refused"] = sum(sum(l["dropped"].values()) for l in links)
    return out


def probe(args, links, rate, mode):
    """One serve fed by one emit at `rate` a link, measured; returns the point's figures."""
    serve_extra, emit_extra = MODES[mode]
    port = free_port(socket.SOCK_DGRAM)
    d = tempfile.mkdtemp(prefix="snbuf-sweep-")
    sock = os.path.join(d, "ctl")
    rate_s = f"{rate:.0f}B/s"
    serve = subprocess.Popen(
        [args.snbuf, "serve", "--source", f"udp://127.0.0.1:{port}", "--frame", "wibeth", "--links", str(links),
         "--rate-per-link", rate_s, "--buffer", "1s", "--pre", "0.4s", "--post", "0.4s", "--output",
         os.path.join(d, "out"), "--socket", sock, "--metrics", "127.0.0.1:0"] + serve_extra,
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "serve.log"), "w"))
    emit = None
    try:
        deadline = time.time() + 30
        while status(args, sock) is None:
            if serve.poll() is not None or time.time() > deadline:
                sys.exit(f"ingest_sweep: serve did not start: {open(os.path.join(d, 'serve.log')).read()[-500:]}")
            time.sleep(0.2)
        emit_s = args.warmup + args.seconds + 1.0
        emit = subprocess.Popen(
            [args.snbuf, "emit", "--to", f"udp://127.0.0.1:{port}", "--links", str(links), "--frame", "wibeth",
             "--rate-per-link", rate_s, "--duration", f"{emit_s}s", "--json", os.path.join(d, "emit.json")]
            + emit_extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = status(args, sock)
        time.sleep(args.warmup)
        c0, s0 = cpu_ticks(serve.pid), status(args, sock)
        time.sleep(args.seconds)
        c1, s1 = cpu_ticks(serve.pid), status(args, sock)
        emit.wait(timeout=emit_s + 30)
        time.sleep(0.3)
        end = status(args, sock)
        with open(os.path.join(d, "emit.json")) as f:
            er = json.load(f)
    finally:
        if emit and emit.poll() is None:
            emit.kill()
        serve.terminate()
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
        shutil.rmtree(d, ignore_errors=True)
    a, b = totals(s0), totals(s1)
    whole_a, whole_b = totals(start), totals(end)
    got = b["bytes"] - a["bytes"]
    gib = got / GIB
    lost = {k: whole_b[k] - whole_a[k] for k in ("kernel_drops", "sequence_gap_frames", "timestamp_gap_frames",
                                                   "refused")}
    frames = b["frames"] - a["frames"]
    calls = b["receive_calls"] - a["receive_calls"]
    msgs = b["receives"] - a["receives"]
    return {
        "received_bytes_per_s": got / args.seconds,
        "process_cpu_core_s_per_gib": (c1[0] - c0[0]) / gib if gib else None,
        "receive_cpu_core_s_per_gib": (c1[1] - c0[1]) / gib if gib else None,
        "frames_per_message": frames / msgs if msgs else None,
        "frames_per_receive_call": frames / calls if calls else None,
        "loss": lost,
        "loss_free": not any(lost.values()),
        "sender_max_lag_s": er.get("max_lag_s"),
        "sender_bytes_per_s": er.get("bytes_per_s"),
    }


def record_defaults(args):
    """`snbuf record` on its defaults (emulated links): its whole process's and its emulation's
    CPU per GiB, from its own report."""
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "record.json")
        subprocess.run([args.snbuf, "record", "--output", os.path.join(d, "out"), "--json", js], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        with open(js) as f:
            r = json.load(f)
    return {key: r[key] for key in ("cpu_core_s_per_gib", "source_cpu_core_s_per_gib", "lost_frames", "valid",
                                     "frame_bytes")} | {"frame_type": r["frame"]["frame_type"]}


def copy_floor(args):
    """The copy floor's and the plain memcpy's core-seconds per GiB (`snbuf bench checksum`),
    and the machine as that run probed it."""
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "checksum.json")
        subprocess.run([args.snbuf, "bench", "checksum", "--dram-size", "1GiB", "--passes", "3", "--json", js],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        with open(js) as f:
            rep = json.load(f)
    rows = rep["results"]
    floor = [r for r in rows if r["variant"].startswith("copy floor")]
    memcpy = [r for r in rows if r["variant"].startswith("plain memcpy") and r["source"] == "dram"]
    if not floor:
        sys.exit("ingest_sweep: snbuf bench checksum has no copy floor row")
    return floor[0]["core_s_per_gib"], memcpy[0]["core_s_per_gib"] if memcpy else None, rep["machine"]


def iperf3(args, total_rate):
    """iperf3's UDP receiver at `total_rate` for --seconds, with snbuf's socket buffer."""
    got = iperf3_udp(total_rate, args.seconds, "16M")
    return {key: got[key] for key in ("received_bytes_per_s", "receiver_cpu_core_s_per_gib", "lost_datagrams")}


def median(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--snbuf", required=True)
    p.add_argument("--seconds", type=float, default=5.0, help="measured interval per probe (default 5)")
    p.add_argument("--warmup", type=float, default=1.5, help="seconds of input before measuring (default 1.5)")
    p.add_argument("--repeat", type=int, default=3, help="repeats, in turns (default 3)")
    p.add_argument("--points", default=None, help="comma-separated indexes of the points to run (default all)")
    p.add_argument("--json", default=None, help="where the result goes")
    args = p.parse_args()
    pts = points()
    if args.points:
        pts = [pts[int(i)] for i in args.points.split(",")]
    given = sys.argv[1:]
    if "--snbuf" in given:
        i = given.index("--snbuf")
        given = given[:i] + given[i + 2:]
    command = " ".join(["bench/ingest.sh", "sweep"] + given)
    # iperf3's -w 16M is capped by net.core.rmem_max (snbuf, as root, forces its own): the same
    # socket buffer for both, restored after the run.
    saved = raise_socket_limits(32 << 20)
    try:
        repeats = sweep(args, pts)
    finally:
        for path, old in saved.items():
            with open(path, "w") as f:
                f.write(str(old))
    write_result(args, pts, repeats, command)


def sweep(args, pts):
    """Every repeat: the copy floor, `record` on its defaults, and every point in every mode."""
    repeats = []
    for k in range(args.repeat):
        floor, memcpy, machine = copy_floor(args)
        began = time.time()
        rep = {"copy_floor_core_s_per_gib": floor, "memcpy_core_s_per_gib": memcpy, "machine": machine,
               "points": []}
        print(f"repeat {k + 1}: copy floor {floor:.3f} core-s/GiB (memcpy DRAM to DRAM {memcpy:.3f})", flush=True)
        rec = record_defaults(args)
        rec["over_copy_floor"] = rec["cpu_core_s_per_gib"] / floor
        rec["source_over_copy_floor"] = rec["source_cpu_core_s_per_gib"] / floor
        rep["record_defaults"] = rec
        print(f"  snbuf record on its defaults: {rec['cpu_core_s_per_gib']:.3f} core-s/GiB "
              f"({rec['over_copy_floor']:.2f}x floor), emulation {rec['source_cpu_core_s_per_gib']:.3f} "
              f"({rec['source_over_copy_floor']:.2f}x)", flush=True)
        for name, links, rate in pts:
            row = {"point": name, "links": links, "bytes_per_s_per_link": rate, "iperf3": iperf3(args, links * rate)}
            order = list(MODES) if k % 2 == 0 else list(reversed(MODES))
            for mode in order:
                m = probe(args, links, rate, mode)
                for key in ("process_cpu_core_s_per_gib", "receive_cpu_core_s_per_gib"):
                    if m[key] is not None:
                        m[key.replace("core_s_per_gib", "over_copy_floor")] = m[key] / floor
                row[mode] = m
                print(f"  {name}, {mode}: process {m['process_cpu_core_s_per_gib'] or 0:.3f} core-s/GiB "
                      f"({m.get('process_cpu_over_copy_floor', 0):.2f}x floor), receive thread "
                      f"{m['receive_cpu_core_s_per_gib'] or 0:.3f}, {m['frames_per_receive_call'] or 0:.1f} frames a call, "
                      f"{'loss-free' if m['loss_free'] else 'LOSS ' + json.dumps(m['loss'])}", flush=True)
            ip = row["iperf3"]
            if "receiver_cpu_core_s_per_gib" in ip and ip["receiver_cpu_core_s_per_gib"]:
                ip["receiver_cpu_over_copy_floor"] = ip["receiver_cpu_core_s_per_gib"] / floor
            rep["points"].append(row)
        rep["seconds"] = time.time() - began
        repeats.append(rep)
    return repeats


def write_result(args, pts, repeats, command):
    """Medians per point and mode over the repeats (ratios taken within each repeat), and the
    raw repeats, into the result file."""
    med = []
    for i, (name, links, rate) in enumerate(pts):
        row = {"point": name, "links": links, "bytes_per_s_per_link": rate}
        for mode in MODES:
            ms = [r["points"][i][mode] for r in repeats]
            row[mode] = {key: median([m.get(key) for m in ms]) for key in
                         ("received_bytes_per_s", "process_cpu_core_s_per_gib", "process_cpu_over_copy_floor",
                          "receive_cpu_core_s_per_gib", "receive_cpu_over_copy_floor", "frames_per_message",
                          "frames_per_receive_call")}
            row[mode]["loss_free_repeats"] = sum(m["loss_free"] for m in ms)
        ips = [r["points"][i]["iperf3"] for r in repeats]
        row["iperf3"] = {key: median([x.get(key) for x in ips]) for key in
                         ("received_bytes_per_s", "receiver_cpu_core_s_per_gib", "receiver_cpu_over_copy_floor")}
        med.append(row)
    result = {
        "suite": "ingest_sweep",
        "schema_version": 1,
        "date": datetime.date.today().isoformat(),
        "command": command,
        "machine": {"hostname": platform.node(), "cpu_model": repeats[0]["machine"].get("cpu_model"),
                    "logical_cpus": os.cpu_count(), "kernel": platform.release(),
                    "git_commit": repeats[0]["machine"].get("git_commit")},
        "frame_bytes": FRAME,
        "seconds_per_probe": args.seconds,
        "seconds": sum(r["seconds"] for r in repeats),
        "copy_floor_core_s_per_gib": median([r["copy_floor_core_s_per_gib"] for r in repeats]),
        "record_defaults": {key: median([r["record_defaults"][key] for r in repeats]) for key in
                            ("cpu_core_s_per_gib", "over_copy_floor", "source_cpu_core_s_per_gib",
                             "source_over_copy_floor")},
        "repeats": repeats,
        "median": med,
    }
    out = args.json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "ingest_sweep",
                                    f"{result['date']}-{platform.node()}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"ingest_sweep: {out}")


if __name__ == "__main__":
    main()
