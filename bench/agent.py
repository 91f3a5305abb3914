"""Benchmark: `hotstack agent` (discovery.process -> pyroscope.ebpf at 19 Hz -> pyroscope.write to a
local push receiver) over 200 busy and idle processes, next to `hotstack run profile_cpu` on the
same load in the same run (both restricted to the load's processes: a keep rule on the command
line / --comm or --pid). Prints each one's CPU (share of one core) and RSS, their ratio and the load average.

    sudo .venv/bin/python bench/agent.py [--seconds 60] [--processes 200] [--busy 20]
    sudo .venv/bin/python bench/agent.py --processes 0 --jvms 10 --nodes 10    # issue 14: Java and Node frames
    sudo .venv/bin/python bench/agent.py --processes 0 --busy 0 --ruby 10 --php 10 --perl 10   # issue 15

With --jvms/--nodes the load also holds that many JVMs (tests/runtimes/hotspot/HotWork.java, one thread)
and Node processes (a script like tests/runtimes/node_work.js), each working --runtime-busy ms every
100 ms; both profilers then walk and name their frames (on by default), and the agent's /metrics
show how many of each it follows.

Targets (issue 4): the agent under 1% of a core and under 150 MB RSS; issue 14: the same with 10 JVMs
and 10 Node processes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from procstat import cpu_seconds, load_average, rss_mb, start

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

NODE_JS = r"""
// A duty-cycled node_work.js: optimized (TurboFan) and parsing (JSON.parse) 3:1, BUSY ms every 100 ms.
const busy = Number(process.argv[2] || 5);
const text = JSON.stringify({a: [1, 2, 3, {b: "x".repeat(50)}], c: {d: 1.5, e: [true, false, null]}});
let sink = 0;
function optimized(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) for (let i = 0; i < 20000; i++) x = (x * 31 + i) % 1000003;
  return x;
}
function parsing(ms) {
  const end = Date.now() + ms;
  let n = 0;
  while (Date.now() < end) for (let i = 0; i < 50; i++) n += JSON.parse(text).a.length;
  return n;
}
console.log("ready");
setInterval(() => { sink += optimized(busy * 0.75) + parsing(busy * 0.25); }, 100);
"""

# Ruby, PHP and Perl loads (issue 15): two hot functions 3:1, BUSY ms every 100 ms, like NODE_JS.
INTERPRETER_LOADS = {   # language: (file, interpreter, script)
    "ruby": ("load.rb", "ruby", r"""
busy = (ARGV[0] || 5).to_f / 1000
def spin(t)
  e = Process.clock_gettime(Process::CLOCK_MONOTONIC) + t
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < e
  x
end
def hot_a(t) = spin(t)
def hot_b(t) = spin(t)
$stdout.puts "ready"
$stdout.flush
loop { hot_a(busy * 0.75); hot_b(busy * 0.25); sleep(0.1 - busy) }
"""),
    "php": ("load.php", "php", r"""<?php
$busy = ($argv[1] ?? 5) / 1000;
function spin($t) { $e = microtime(true) + $t; $x = 0; while (microtime(true) < $e) $x++; return $x; }
function hot_a($t) { return spin($t); }
function hot_b($t) { return spin($t); }
echo "ready\n";
while (true) { hot_a($busy * 0.75); hot_b($busy * 0.25); usleep((int)((0.1 - $busy) * 1e6)); }
"""),
    "perl": ("load.pl", "perl", r"""
use strict; use warnings; use Time::HiRes qw(time usleep);
$| = 1;
my $busy = ($ARGV[0] // 5) / 1000;
sub spin { my $e = time + $_[0]; my $x = 0; $x++ while time < $e; return $x }
sub hot_a { return spin($_[0]) }
sub hot_b { return spin($_[0]) }
print "ready\n";
while (1) { hot_a($busy * 0.75); hot_b($busy * 0.25); usleep((0.1 - $busy) * 1e6) }
"""),
}

HOTWORK = Path(__file__).resolve().parent.parent / "tests" / "runtimes" / "hotspot" / "HotWork.java"

CONFIG = """
discovery.process "all" {
  refresh_interval = "15s"
}
discovery.relabel "named" {
  targets = discovery.process.all.targets
  // the load of this benchmark (its files are in a load/ directory of its own), not whatever else
  // runs on the machine, nor the profilers themselves
  rule {
    action        = "keep"
    source_labels = ["__meta_process_commandline"]
    regex         = ".*hotstack-bench-agent-[^ /]*/load([ /].*)?"
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


def runtime_metrics(listen: str) -> list[str]:
    """The agent's hotstack_runtime_* lines of the runtimes in the load (processes followed, frames, names, errors)."""
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as r:
        text = r.read().decode()
    return [line for line in text.splitlines() if line.startswith("hotstack_runtime_")
            and any(f'"{name}"' in line for name in ("hotspot", "v8", *INTERPRETER_LOADS))]


def sessions(listen: str) -> float:
    """The agent's profiling sessions started so far (a restart while measuring would count a start-up)."""
    with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as r:
        return sum(float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                   if line.startswith("pyroscope_ebpf_profiling_sessions_total"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--processes", type=int, default=200)
    ap.add_argument("--busy", type=int, default=20, help="how many of them spin 5 ms every 100 ms")
    ap.add_argument("--warmup", type=float, default=20,
                    help="seconds to let both settle after the agent's first push, before measuring")
    ap.add_argument("--start-timeout", type=float, default=300, help="seconds to wait for the agent's first push")
    ap.add_argument("--jvms", type=int, default=0, help="JVMs (HotWork, one thread) in the load")
    ap.add_argument("--nodes", type=int, default=0, help="Node processes in the load")
    for lang in INTERPRETER_LOADS:
        ap.add_argument(f"--{lang}", type=int, default=0, metavar="N", help=f"{lang} processes in the load (issue 15)")
    ap.add_argument("--runtime-busy", type=int, default=5, help="ms each runtime process works every 100 ms")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/agent.py: run as root (eBPF)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-agent-"))
    load = []
    agent = gadget = None
    try:
        files = tmp / "load"
        files.mkdir()
        (files / "load.c").write_text(LOAD_C)
        subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", str(files / "load.c"), "-o", str(files / "bench-load")],
                       check=True)
        for i in range(args.processes):
            busy = "5" if i < args.busy else "0"
            load.append(subprocess.Popen([str(files / "bench-load"), busy]))
        if args.jvms:
            subprocess.run(["javac", "-d", str(files), str(HOTWORK)], check=True, timeout=120)
        for _ in range(args.jvms):
            load.append(start(["java", "-cp", str(files), "HotWork", "36000", "1", "0", str(args.runtime_busy)]))
        (files / "load.js").write_text(NODE_JS)
        for _ in range(args.nodes):
            load.append(start(["node", str(files / "load.js"), str(args.runtime_busy)]))
        interpreters = {lang: getattr(args, lang) for lang in INTERPRETER_LOADS}
        for lang, count in interpreters.items():
            name, interpreter, script = INTERPRETER_LOADS[lang]
            (files / name).write_text(script)
            for _ in range(count):
                load.append(start([interpreter, str(files / name), str(args.runtime_busy)]))
        receiver = Receiver()
        (tmp / "bench.alloy").write_text(CONFIG % receiver.url)
        hotstack = [sys.executable, "-m", "hotstack"]
        with socket.socket() as s:      # a free port for the agent's /metrics
            s.bind(("127.0.0.1", 0))
            listen = f"127.0.0.1:{s.getsockname()[1]}"
        agent = subprocess.Popen([*hotstack, "agent", str(tmp / "bench.alloy"),
                                  "--server.http.listen-addr", listen, "--log.level", "warn"])
        runtimes = args.jvms or args.nodes or any(interpreters.values())
        scope = [a for p in load for a in ("--pid", str(p.pid))] if runtimes else ["--comm", "bench-load"]
        gadget = subprocess.Popen([*hotstack, "run", "profile_cpu", "--map-fetch-interval", "0", "--sample-rate", "19", "--timeout", "0",
                                   "--map-fetch-interval", "15s", "-o", "none", *scope, "--host"], stdout=subprocess.DEVNULL)
        # On a loaded host the programs' verification alone can take longer than the warm-up: the
        # warm-up starts once the agent has pushed (its engine runs), so start-up is never measured.
        started = time.monotonic()
        while receiver.pushes == 0 and agent.poll() is None and time.monotonic() - started < args.start_timeout:
            time.sleep(0.5)
        if receiver.pushes == 0:
            print(f"bench/agent.py: the agent pushed nothing in {time.monotonic() - started:.0f} s", file=sys.stderr)
            return 1
        first_push = time.monotonic() - started
        time.sleep(args.warmup)
        sessions0 = sessions(listen)
        cpu0 = {p.pid: cpu_seconds(p.pid) for p in (agent, gadget)}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - t0
        used = {p.pid: cpu_seconds(p.pid) - cpu0[p.pid] for p in (agent, gadget)}
        restarts = sessions(listen) - sessions0
        rss = {p.pid: rss_mb(p.pid) for p in (agent, gadget)}
        a_cpu, g_cpu = used[agent.pid] / wall, used[gadget.pid] / wall
        print(f"load: {args.processes} processes ({args.busy} busy 5%, {args.processes - args.busy} idle), "
              f"{args.jvms} JVMs, {args.nodes} Node, "
              + "".join(f"{n} {lang}, " for lang, n in interpreters.items())
              + f"runtime processes busy {args.runtime_busy}%, "
              f"{os.cpu_count()} CPUs, measured {wall:.0f} s after the agent's first push ({first_push:.0f} s) "
              f"and {args.warmup:.0f} s warm-up; "
              f"load average {load_average()}")
        print(f"{'':34}{'CPU (% of a core)':>18}{'RSS now / peak (MB)':>22}")
        print(f"{'hotstack agent (pyroscope.ebpf)':34}{100 * a_cpu:>17.2f}%"
              f"{rss[agent.pid][0]:>13.0f} / {rss[agent.pid][1]:.0f}")
        print(f"{'hotstack run profile_cpu':34}{100 * g_cpu:>17.2f}%"
              f"{rss[gadget.pid][0]:>13.0f} / {rss[gadget.pid][1]:.0f}")
        print(f"ratio agent / profile_cpu: CPU {a_cpu / g_cpu if g_cpu else float('nan'):.2f}x, "
              f"RSS {rss[agent.pid][0] / rss[gadget.pid][0]:.2f}x")
        print(f"receiver: {receiver.pushes} pushes, {receiver.bytes / 1024:.0f} KiB; "
              f"agent sessions started while measured: {restarts:.0f}" + (" (NOT a steady-state run)" if restarts else ""))
        if runtimes:
            print("agent /metrics: " + ", ".join(runtime_metrics(listen)))
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
