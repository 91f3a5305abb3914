"""Soak: `hotstack agent` reloaded every --every seconds for --seconds, each reload renaming
pyroscope.ebpf, removing it, adding it back or changing its sample rate (each closes one engine
and starts another), with a busy process as its target and /metrics scraped after each reload.
Prints, after each reload, the agent's BPF links, programs and maps, its perf events (from its
descriptors' fdinfo) and its RSS: all must stay flat (issue 47, item 7: 2 links leaked a reload).

    sudo .venv/bin/python bench/reload_soak.py [--seconds 600] [--every 30]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter

WRITE = 'pyroscope.write "w" {\n  endpoint {\n    url = "http://127.0.0.1:9"\n  }\n}\n'
# what each reload does, in turn: (component label or None, sample rate)
STEPS = [("b", 19), (None, 19), ("b", 19), ("b", 23), ("c", 23), (None, 23), ("a", 19)]


def config(label: str | None, pid: int, rate: int) -> str:
    if label is None:
        return WRITE
    return WRITE + (f'pyroscope.ebpf "{label}" {{\n  targets = [{{"__process_pid__" = "{pid}"}}]\n'
                    f'  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "5s"\n'
                    f'  sample_rate = {rate}\n}}\n')


def held(pid: int) -> Counter:
    """BPF links, programs, maps and perf events process `pid` holds (its fdinfo)."""
    counts: Counter = Counter()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = f.read()
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kind = ("links" if "\nlink_id:" in info else "programs" if "\nprog_id:" in info
                else "maps" if "\nmap_id:" in info else "perf" if target == "anon_inode:[perf_event]" else None)
        if kind:
            counts[kind] += 1
    return counts


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            r.read()
            return r.status
    except OSError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--every", type=float, default=30)
    args = ap.parse_args()
    busy = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    work = tempfile.mkdtemp(prefix="hotstack-soak-")
    path = os.path.join(work, "agent.alloy")
    with open(path, "w") as f:
        f.write(config("a", busy.pid, 19))
    port = free_port()
    log = open(os.path.join(work, "agent.log"), "w")
    agent = subprocess.Popen([sys.executable, "-m", "hotstack", "agent", path, "--server.http.listen-addr",
                              f"127.0.0.1:{port}", "--storage.path", work], stdout=log, stderr=subprocess.STDOUT)
    failed_scrapes = 0
    try:
        time.sleep(args.every)
        print(f"{'s':>5} {'step':>10} {'links':>5} {'progs':>5} {'maps':>5} {'perf':>5} {'rss MB':>7} scrape")
        started = time.monotonic()
        step = 0
        while time.monotonic() - started < args.seconds:
            label, rate = STEPS[step % len(STEPS)]
            with open(path, "w") as f:
                f.write(config(label, busy.pid, rate))
            agent.send_signal(signal.SIGHUP)
            time.sleep(args.every)
            status = scrape(port)
            failed_scrapes += status != 200
            c = held(agent.pid)
            print(f"{time.monotonic() - started:5.0f} {str(label) + '@' + str(rate):>10} {c['links']:5} "
                  f"{c['programs']:5} {c['maps']:5} {c['perf']:5} {rss_mb(agent.pid):7.1f} {status}", flush=True)
            step += 1
    finally:
        agent.terminate()
        agent.wait(timeout=120)
        busy.kill()
        busy.wait()
        log.close()
    with open(os.path.join(work, "agent.log")) as f:
        tracebacks = f.read().count("Traceback")
    print(f"failed scrapes: {failed_scrapes}, tracebacks in the log: {tracebacks} ({work}/agent.log)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
