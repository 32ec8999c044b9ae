#!/usr/bin/env python3
"""A unit at DUNE's operating shape, scaled in rate only: N links at R MB/s, a 10 s buffer,
alerts whose windows run 9 s before to 100 s after them (the buffer's 10 s, less the margin a
trigger needs to reach the unit). One `snbuf serve` (release build, default method) on one
output, driven over its control socket as an operator's tools would:

  (a) one alert;
  (b) a second 50 s into the first (it joins: the burst grows past --max-window);
  (c) a third 3 s after the grown window's end, while the first is sealed and read back;
  (d) one while a burst is being exported (when the unit exports: --export-to);

then, with --soak-minutes, an alert every --soak-every seconds for that long, the unit's
memory, open files, threads and journal sampled at start and end (each burst deleted once
sealed and counted, so the soak fits on the disk).

Per alert: the window asked and recorded, frames lost, the time from issue to accepted and to
sealed, and whether it was kept (its whole window on disk with 0 frames lost, the burst valid).
One JSON line per alert (and one for the soak) to --lines; bench/dune_shape.sh keeps them.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

WINDOW_PRE_S, WINDOW_POST_S = 9.0, 100.0


def ask(sock_path, request, timeout_s=60.0):
    """One request on the unit's control socket, its JSON reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(sock_path)
        s.sendall((json.dumps(request) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


def status(sock_path):
    return ask(sock_path, {"cmd": "status"})


def wait_until(what, ok, within_s, every_s=0.05):
    deadline = time.monotonic() + within_s
    while True:
        v = ok()
        if v:
            return v
        if time.monotonic() > deadline:
            sys.exit(f"dune_shape: {what} did not happen within {within_s:.0f} s")
        time.sleep(every_s)


class Unit:
    def __init__(self, args, out_dir):
        self.args, self.out = args, out_dir
        self.sock = os.path.join(out_dir, "snbuf.sock")
        os.makedirs(out_dir, exist_ok=True)
        cmd = [args.snbuf, "serve", "--output", out_dir, "--socket", self.sock,
               "--links", str(args.links), "--rate-per-link", f"{args.rate_mb_s}MB/s",
               "--buffer", "10s"]
        if args.export_to:
            cmd += ["--export-to", args.export_to]
        self.log = open(os.path.join(os.path.dirname(out_dir), "serve.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_until("the unit's socket", lambda: os.path.exists(self.sock), 30)
        self.hz = status(self.sock)["clock_hz"]

    def stop(self):
        try:
            ask(self.sock, {"cmd": "shutdown"}, 10)
            self.proc.wait(timeout=600)
        except Exception:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def trigger(self, burst_id, post_s=WINDOW_POST_S):
        issued = time.monotonic()
        reply = ask(self.sock, {"cmd": "trigger", "burst_id": burst_id, "pre_s": WINDOW_PRE_S,
                                "post_s": post_s})
        if not reply.get("ok"):
            print(f"dune_shape: trigger {burst_id} refused: {reply}", file=sys.stderr)
        return {"trigger": burst_id, "issued": issued, "accepted_s": time.monotonic() - issued,
                "reply": reply}

    def done_with(self, burst):
        """Burst `burst` is counted: once exported (when the unit exports), it is removed, so
        that the runs fit on the disk (and, on tmpfs, in memory)."""
        if not burst:
            return
        d = os.path.join(self.out, burst)
        if self.args.export_to:
            wait_until(f"burst {burst} exported", lambda: os.path.exists(
                os.path.join(d, "export.json")), 1800, 0.5)
        shutil.rmtree(d, ignore_errors=True)

    def sealed(self, burst, within_s=900):
        def done():
            for b in status(self.sock)["bursts"]:
                if b["burst_id"] == burst:
                    return b
            return None
        return wait_until(f"burst {burst} sealed", done, within_s, 0.2)

    def newest(self):
        return status(self.sock).get("newest_timestamp") or 0

    def sample(self):
        pid = self.proc.pid
        rss_kib = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss_kib = int(line.split()[1])
        journal = os.path.join(self.out, "fleet-triggers.jsonl")
        return {"rss_bytes": rss_kib * 1024, "open_files": len(os.listdir(f"/proc/{pid}/fd")),
                "threads": len(os.listdir(f"/proc/{pid}/task")),
                "journal_bytes": os.path.getsize(journal) if os.path.exists(journal) else None}


def row(unit, scenario, t, outcome, sealed_at):
    """One alert's figures, from its reply and its burst's manifest; written to the lines file
    at once, so that a run cut short keeps what it measured."""
    r = measure(unit, scenario, t, outcome, sealed_at)
    with open(unit.args.lines, "a") as f:
        f.write(json.dumps({**unit.scale, **r}) + "\n")
    print(json.dumps(r), flush=True)
    return r


def measure(unit, scenario, t, outcome, sealed_at):
    reply = t["reply"]
    if not reply.get("ok"):
        return {"scenario": scenario, "trigger": t["trigger"], "burst": None, "joined": False,
                "window_asked_s": WINDOW_PRE_S + WINDOW_POST_S, "window_recorded_s": 0.0,
                "frames_lost": None, "accepted_s": round(t["accepted_s"], 4), "sealed_s": None,
                "kept": False, "refused": reply.get("error")}
    asked = reply["window"]
    asked_s = (asked["window_end_timestamp"] - asked["window_start_timestamp"]) / unit.hz
    burst = reply.get("burst_id")
    manifest = {}
    path = os.path.join(unit.out, burst or "", "manifest.json")
    if burst and os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
    mine = next((x for x in manifest.get("triggers", []) if x["trigger_id"] == t["trigger"]), None)
    recorded_s = ((mine["covered_end_timestamp"] - mine["covered_start_timestamp"]) / unit.hz
                  if mine else 0.0)
    lost = sum(link["lost_frames"] for link in manifest.get("links", []))
    whole = mine is not None and mine["covered_end_timestamp"] == mine["window_end_timestamp"] \
        and mine["covered_start_timestamp"] == mine["window_start_timestamp"]
    kept = bool(reply.get("ok")) and whole and lost == 0 and outcome.get("valid") is True \
        and outcome.get("state") == "sealed"
    return {"scenario": scenario, "trigger": t["trigger"], "burst": burst,
            "joined": reply.get("joined") is not None, "window_asked_s": round(asked_s, 3),
            "window_recorded_s": round(recorded_s, 3), "frames_lost": lost,
            "accepted_s": round(t["accepted_s"], 4),
            "sealed_s": round(sealed_at - t["issued"], 2), "kept": kept,
            **({"after_window_end_s": round(t["after_window_end_s"], 3)}
               if "after_window_end_s" in t else {})}


def one(unit, scenario, t):
    """Alert `t`'s row once its burst is sealed (a refused one: at once)."""
    burst = t["reply"].get("burst_id")
    out = unit.sealed(burst) if t["reply"].get("ok") else {}
    return row(unit, scenario, t, out, time.monotonic())


def alerts(unit):
    """Scenarios (a) to (d); their rows."""
    rows = []
    time.sleep(10.5)  # the buffer full: each alert's 9 s before it are there
    rows.append(one(unit, "a: one alert", unit.trigger("a")))
    unit.done_with("a")

    b1 = unit.trigger("b1")
    time.sleep(50)
    b2 = unit.trigger("b2")
    # (c): 3 s of detector time after the grown window's end, whatever the burst is doing.
    end = max(t["reply"]["window"]["window_end_timestamp"] for t in (b1, b2)
              if t["reply"].get("ok"))
    wait_until("the grown window's end", lambda: unit.newest() >= end + 3 * unit.hz, 400)
    c = unit.trigger("c")
    if c["reply"].get("ok"):
        c["after_window_end_s"] = (c["reply"]["window"]["trigger_timestamp"] - end) / unit.hz
    rows.append(one(unit, "b: the first of two", b1))
    rows.append(one(unit, "b: a second 50 s into it", b2))
    rows.append(one(unit, "c: 3 s after the window's end", c))
    if unit.args.export_to:
        # (d): b is exported now (c was recorded beside its seal and export); an alert while
        # c's export runs records beside it.
        time.sleep(1.0)
        d = unit.trigger("d")
        unit.done_with(b1["reply"].get("burst_id"))
        rows.append(one(unit, "d: while a burst exports", d))
        unit.done_with(d["reply"].get("burst_id"))
    unit.done_with(c["reply"].get("burst_id"))
    return rows


def soak(unit, minutes, every_s):
    time.sleep(10.5)  # the buffer full, as for the alerts
    start = unit.sample()
    started = time.monotonic()
    kept, lost, n = 0, 0, 0
    while time.monotonic() - started < minutes * 60:
        n += 1
        t = unit.trigger(f"soak-{n:04d}")
        r = measure(unit, "soak alert", t, unit.sealed(t["reply"]["burst_id"])
                    if t["reply"].get("ok") else {}, time.monotonic())
        kept += r["kept"]
        lost += not r["kept"]
        unit.done_with(r["burst"])
        time.sleep(max(0.0, started + n * every_s - time.monotonic()))
    end = unit.sample()
    r = {"scenario": "soak", "minutes": round((time.monotonic() - started) / 60, 1),
         "alerts": n, "kept": kept, "lost": lost, "start": start, "end": end,
         "rss_growth": round(end["rss_bytes"] / start["rss_bytes"] - 1, 4)}
    with open(unit.args.lines, "a") as f:
        f.write(json.dumps({**unit.scale, **r}) + "\n")
    print(json.dumps(r), flush=True)
    return r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--snbuf", required=True)
    p.add_argument("--output", required=True, help="a fresh directory on the medium")
    p.add_argument("--medium", required=True, help="its name in the result (ext4, tmpfs)")
    p.add_argument("--links", type=int, default=10)
    p.add_argument("--rate-mb-s", type=float, default=10.0)
    p.add_argument("--export-to")
    p.add_argument("--soak-minutes", type=float, default=0.0)
    p.add_argument("--soak-every", type=float, default=180.0)
    p.add_argument("--lines", required=True)
    args = p.parse_args()
    unit = Unit(args, args.output)
    unit.scale = {"medium": args.medium, "links": args.links,
                  "rate_mb_s_per_link": args.rate_mb_s, "buffer_s": 10.0,
                  "pre_s": WINDOW_PRE_S, "post_s": WINDOW_POST_S, "export_to": args.export_to}
    try:
        rows = alerts(unit) if args.soak_minutes == 0 else [soak(unit, args.soak_minutes,
                                                                  args.soak_every)]
    finally:
        unit.stop()
    bad = [r for r in rows if r.get("kept") is False or r.get("lost")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
