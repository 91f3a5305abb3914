"""Benchmark: memory of `hotstack agent` while its Pyroscope endpoint hangs (issue 18, item 5).

The agent profiles a load of busy processes, each its own service (so each collect_interval makes
one push per process), and pushes to a receiver that reads each request and never answers. The
agent's RSS is sampled every second for the whole run; after a warm-up it must stay flat: the
push queue is bounded in bytes and items, an attempt ends at remote_timeout, and what does not fit
is dropped (and counted) at once.

    sudo .venv/bin/python bench/hanging_endpoint.py [--seconds 600] [--processes 40] [--csv rss.csv]

Also runs the pusher alone (tests/export/push_memory.py) at 50 pushes/s of 2 MiB profiles for the
same time, unless --agent-only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent import LOAD_C, rss_mb  # noqa: E402  (bench/agent.py: the load program, /proc readers)

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """
discovery.process "all" {
  refresh_interval = "5s"
}
discovery.relabel "each" {
  targets = discovery.process.all.targets
  rule {
    action        = "keep"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/bench-hang-load"
  }
  // one service per process: one push per process and interval
  rule {
    action        = "replace"
    source_labels = ["__meta_process_pid"]
    target_label  = "service_name"
    replacement   = "hang-$1"
  }
}
pyroscope.ebpf "bench" {
  targets          = discovery.relabel.each.output
  forward_to       = [pyroscope.write.hanging.receiver]
  sample_rate      = 97
  collect_interval = "1s"
}
pyroscope.write "hanging" {
  endpoint {
    url = "%s"
  }
}
"""


class HangingReceiver:
    """Accepts connections, reads what comes, never answers (until closed); with `answer`, a
    receiver that accepts every push at once (the control run)."""

    def __init__(self, answer: bool = False) -> None:
        self.answer = answer
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.bytes = 0
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                try:
                    data = conn.recv(1 << 16)
                except OSError:
                    return
                if not data:
                    return
                self.bytes += len(data)
                if self.answer and self._request_complete(data):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n")

    _pending = b""

    def _request_complete(self, data: bytes) -> bool:
        """One request at a time per connection (the pusher waits for each answer)."""
        self._pending += data
        head, sep, body = self._pending.partition(b"\r\n\r\n")
        if not sep:
            return False
        length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
        if len(body) < length:
            return False
        self._pending = body[length:]
        return True

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mr = sum(r for _, r in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 60 * sum((t - mt) * (r - mr) for t, r in points) / var if var else 0.0


def run_agent(args, tmp: Path) -> dict:
    subprocess.run(["cc", "-O1", "-fno-omit-frame-pointer", "-x", "c", "-", "-o", str(tmp / "bench-hang-load")],
                   input=LOAD_C, text=True, check=True)
    load = [subprocess.Popen([str(tmp / "bench-hang-load"), "5"]) for _ in range(args.processes)]
    receiver = HangingReceiver(answer=args.endpoint == "ok")
    (tmp / "hang.alloy").write_text(CONFIG % receiver.url)
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    listen = f"127.0.0.1:{port.getsockname()[1]}"
    port.close()
    log = open(tmp / "agent.log", "w")
    agent = subprocess.Popen([sys.executable, "-m", "hotstack", "agent", str(tmp / "hang.alloy"),
                              "--server.http.listen-addr", listen], stdout=log, stderr=subprocess.STDOUT)
    rows = []
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.warmup + args.seconds:
            time.sleep(1 - (time.monotonic() - t0) % 1)
            if agent.poll() is not None:
                raise SystemExit(f"agent exited: {(tmp / 'agent.log').read_text()[-2000:]}")
            rss, hwm = rss_mb(agent.pid)
            rows.append((round(time.monotonic() - t0, 1), rss, hwm))
        with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        with urllib.request.urlopen(f"http://{listen}/-/healthy", timeout=10) as r:
            healthy = r.status
    except urllib.error.HTTPError as e:
        healthy = e.code
    finally:
        t = time.monotonic()
        agent.terminate()
        agent.wait(timeout=60)
        stop_s = time.monotonic() - t
        for p in load:
            p.kill()
            p.wait()
        receiver.close()
        log.close()
    after = [(t, r) for t, r, _ in rows if t >= args.warmup]
    text = (tmp / "agent.log").read_text()
    if args.csv:
        Path(args.csv).write_text("t_s,rss_mb,hwm_mb\n" + "".join(f"{t},{r:.1f},{h:.1f}\n" for t, r, h in rows))
    return {
        "samples": len(rows), "rss_at_warmup_mb": after[0][1], "rss_max_after_warmup_mb": max(r for _, r in after),
        "rss_min_after_warmup_mb": min(r for _, r in after), "rss_end_mb": after[-1][1], "hwm_end_mb": rows[-1][2],
        "slope_mb_per_min": slope_mb_per_min(after),
        "errors": metric(metrics, "pyroscope_write_errors_total"),
        "dropped_profiles": metric(metrics, "pyroscope_write_dropped_profiles_total"),
        "sent_profiles": metric(metrics, "pyroscope_write_sent_profiles_total"),
        "healthy_status": healthy, "sigterm_to_exit_s": round(stop_s, 2),
        "push_failed_lines": len(re.findall(r"push failed", text)),
        "first_failure_line": next((ln for ln in text.splitlines() if "push failed" in ln), "")[:200],
        "receiver_connections": receiver.connections,
    }


def run_pusher(args) -> dict:
    r = subprocess.run([sys.executable, "-m", "tests.export.push_memory", "--seconds", str(args.warmup + args.seconds),
                        "--rate", "50", "--profile-kib", "2048"], capture_output=True, text=True, cwd=ROOT, check=True)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    samples = [(row["t"], row["rss_kib"] / 1024) for row in rows[1:] if "rss_kib" in row]
    after = [(t, m) for t, m in samples if t >= args.warmup]
    return {"baseline_mb": rows[0]["rss_kib"] / 1024, "rss_max_mb": max(m for _, m in samples),
            "rss_max_after_warmup_mb": max(m for _, m in after), "rss_min_after_warmup_mb": min(m for _, m in after),
            "slope_mb_per_min": slope_mb_per_min(after), "pushed": rows[-1]["pushed"], "dropped": rows[-1]["dropped"],
            "closed_in_s": rows[-1]["closed_in_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--warmup", type=float, default=30)
    ap.add_argument("--processes", type=int, default=40)
    ap.add_argument("--csv", default="")
    ap.add_argument("--agent-only", action="store_true")
    ap.add_argument("--endpoint", choices=("hang", "ok"), default="hang",
                    help="ok: a receiver that accepts every push (the control run)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/hanging_endpoint.py: run as root (eBPF)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="hotstack-bench-hang-"))
    try:
        print(json.dumps({"agent": run_agent(args, tmp)}, indent=1), flush=True)
        if not args.agent_only:
            print(json.dumps({"pusher": run_pusher(args)}, indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
