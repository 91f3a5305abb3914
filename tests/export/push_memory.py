"""Run a Pyroscope pusher against a receiver that never answers, pushing big profiles fast, and
print this process's RSS once a second (one JSON object per line). Used by the memory test and
by bench/hanging_endpoint.py; run as its own process so that RSS is the pusher's alone.

    python -m tests.export.push_memory --seconds 30 --rate 50 --profile-kib 2048
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from hotstack.export.pyroscope import PushSeries, PyroscopeEndpoint, PyroscopePusher

from .connect_server import ConnectPushServer


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=float, default=50, help="pushes per second")
    ap.add_argument("--profile-kib", type=int, default=2048)
    args = ap.parse_args()
    server = ConnectPushServer(["hang"], hang_s=3600)
    pusher = PyroscopePusher(PyroscopeEndpoint(url=server.url, remote_timeout_s=10, max_backoff_retries=0))
    labels = {"__name__": "process_cpu", "service_name": "memory-test"}
    print(json.dumps({"t": 0.0, "rss_kib": rss_kib(), "phase": "baseline"}), flush=True)
    start = time.monotonic()
    next_report = start + 1
    n = 0
    while time.monotonic() - start < args.seconds:
        # A fresh buffer per push, as the profiler makes a new pprof per target and interval.
        pusher.push([PushSeries(labels, os.urandom(16) + bytes(args.profile_kib * 1024 - 16))])
        n += 1
        now = time.monotonic()
        if now >= next_report:
            m = pusher.metrics.snapshot()
            print(json.dumps({"t": round(now - start, 1), "rss_kib": rss_kib(), "pushed": n,
                              "held_kib": getattr(pusher, "held_bytes", -1024) >> 10, "dropped": m["dropped_items"],
                              "errors": m["errors"]}), flush=True)
            next_report += 1
        time.sleep(max(0.0, start + n / args.rate - time.monotonic()))
    t = time.monotonic()
    pusher.close(1.0)
    print(json.dumps({"closed_in_s": round(time.monotonic() - t, 2),
                      "dropped": pusher.metrics.snapshot()["dropped_items"], "pushed": n}), flush=True)
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
