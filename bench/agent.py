"""Benchmark: `hotstack agent` (discovery.process -> pyroscope.ebpf at 19 Hz -> pyroscope.write to a
local push receiver) over 200 busy and idle processes, next to `hotstack run profile_cpu` on the
same load in the same run (both restricted to the load's processes: a keep rule on the
executable / --comm). Prints each one's CPU (share of one core) and RSS, and their ratio.

    sudo .venv/bin/python bench/agent.py [--seconds 60] [--processes 200] [--busy 20]

Targets (issue 4): the agent under 1% of a core and under 150 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from procstat import cpu_seconds, rss_mb

LOAD_C = r"""
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile unsigned long sink;
__attribute__((noinline)) static void bench_work(long ns) {
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    do { for (int i = 0; i < 1000; i++) sink += i; clock_gettime(CLOCK_MONOTONIC, &b); }
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}
int main(int argc, char **argv) {
    long busy_ms = argc > 1 ? atol(argv[1]) : 0;   /* busy: spin busy_ms every 100 ms; idle: sleep */
    for (;;) {
        if (busy_ms) bench_work(busy_ms * 1000000L);
        usleep((100 - busy_ms) * 1000);
    }
}
"""

CONFIG = """
discovery.process "all" {
  refresh_interval = "15s"
}
discovery.relabel "named" {
  targets = discovery.process.all.targets
  // the load of this benchmark, not whatever else runs on the machine
  rule {
    action        = "keep"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/bench-load"
  }
  rule {
    action        = "replace"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/([^/]+)$"
    target_label  = "service_name"
  }
}
pyroscope.ebpf "bench" {
  targets     = discovery.relabel.named.output
  forward_to  = [pyroscope.write.local.receiver]
  sample_rate = 19
}
pyroscope.write "local" {
  endpoint {
    url = "%s"
  }
}
"""


class Receiver:
    """A local push receiver: accepts Connect pushes and counts them."""

    def __init__(self) -> None:
        self.pushes = 0
        self.bytes = 0
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                rec.pushes += 1
                rec.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/proto")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--busy", type=int, default=20, help="how many of them spin 5 ms every 100 ms")
    ap.add_argument("--warmup", type=float, default=20, help="seconds to let both start before measuring")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/agent.py: run as root (eBPF)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-agent-"))
    load = []
    agent = gadget = None
    try:
        (tmp / "load.c").write_text(LOAD_C)
        subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", str(tmp / "load.c"), "-o", str(tmp / "bench-load")],
                       check=True)
        for i in range(args.processes):
            busy = "5" if i < args.busy else "0"
            load.append(subprocess.Popen([str(tmp / "bench-load"), busy]))
        receiver = Receiver()
        (tmp / "bench.alloy").write_text(CONFIG % receiver.url)
        hotstack = [sys.executable, "-m", "hotstack"]
        agent = subprocess.Popen([*hotstack, "agent", str(tmp / "bench.alloy"),
                                  "--server.http.listen-addr", "127.0.0.1:0", "--log.level", "warn"])
        gadget = subprocess.Popen([*hotstack, "run", "profile_cpu", "--map-fetch-interval", "0", "--sample-rate", "19", "--timeout", "0",
                                   "--map-fetch-interval", "15s", "-o", "none", "--comm", "bench-load", "--host"], stdout=subprocess.DEVNULL)
        time.sleep(args.warmup)
        start = {p.pid: cpu_seconds(p.pid) for p in (agent, gadget)}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        used = {p.pid: cpu_seconds(p.pid) - start[p.pid] for p in (agent, gadget)}
        rss = {p.pid: rss_mb(p.pid) for p in (agent, gadget)}
        a_cpu, g_cpu = used[agent.pid] / wall, used[gadget.pid] / wall
        print(f"load: {args.processes} processes ({args.busy} busy 5%, {args.processes - args.busy} idle), "
              f"{os.cpu_count()} CPUs, measured {wall:.0f} s after {args.warmup:.0f} s warm-up")
        print(f"{'':34}{'CPU (% of a core)':>18}{'RSS now / peak (MB)':>22}")
        print(f"{'hotstack agent (pyroscope.ebpf)':34}{100 * a_cpu:>17.2f}%"
              f"{rss[agent.pid][0]:>13.0f} / {rss[agent.pid][1]:.0f}")
        print(f"{'hotstack run profile_cpu':34}{100 * g_cpu:>17.2f}%"
              f"{rss[gadget.pid][0]:>13.0f} / {rss[gadget.pid][1]:.0f}")
        print(f"ratio agent / profile_cpu: CPU {a_cpu / g_cpu if g_cpu else float('nan'):.2f}x, "
              f"RSS {rss[agent.pid][0] / rss[gadget.pid][0]:.2f}x")
        print(f"receiver: {receiver.pushes} pushes, {receiver.bytes / 1024:.0f} KiB")
        print(f"targets: agent CPU < 1%: {'yes' if a_cpu < 0.01 else 'NO'}; "
              f"RSS < 150 MB: {'yes' if rss[agent.pid][1] < 150 else 'NO'}")
        return 0
    finally:
        for p in (agent, gadget):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        for p in load:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
