"""PHP frames of a PHP-FPM pool serving requests, through `hotstack run profile_cpu`.

The test starts the distribution's php-fpm (.ci/install.d/interpreters.sh installs it) in the
foreground with its own config (a static pool of 2 workers on a loopback port, pid file and log in
a temp dir), sends FastCGI requests itself (fcgi.py) from two client threads, 3 `report` requests
for each `search` request, each burning the same CPU time in its handler, and profiles the
workers with the CLI (pprof output, decoded here). Debian's php.ini is used as it is (opcache on,
JIT off), and once with opcache off (each request compiles the script again into memory that the
next request reuses)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from hotstack.profile.pprof_pb2 import Profile as PprofProfile
from tests.peers import INSTALL

import fcgi
from source_lines import function_lines

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
SCRIPTS = {"report": HERE / "fpm_app.php", "search": HERE / "fpm_search.php"}
ROUTES = ("report", "report", "report", "search")
# per script: its chain of frames root first (the handler third), then the functions below it
CHAINS = {"report": ["{main}", "Router::dispatch", "handle_report"], "search": ["{main}", "Finder::dispatch", "handle_search"]}
BELOW = {"report": ("burn", "cpu_seconds"), "search": ("spin", "cpu_time")}


def php_fpm() -> str:
    """Debian's php-fpm is php-fpmX.Y in /usr/sbin."""
    dirs = os.environ.get("PATH", "").split(os.pathsep) + ["/usr/sbin", "/usr/local/sbin"]
    for d in dirs:
        try:
            names = sorted(n for n in os.listdir(d) if n.startswith("php-fpm"))
        except OSError:
            continue
        for n in names:
            if os.access(os.path.join(d, n), os.X_OK):
                return os.path.join(d, n)
    pytest.fail(f"php-fpm is not installed: {INSTALL}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pool:
    """A php-fpm master and its static pool of 2 workers, stopped by pid."""

    def __init__(self, tmp: Path, *ini: str) -> None:
        self.port = free_port()
        self.pid_file = tmp / "fpm.pid"
        self.log = tmp / "fpm.log"
        conf = tmp / "fpm.conf"
        conf.write_text(f"""[global]
pid = {self.pid_file}
error_log = {self.log}
daemonize = no

[hotstack-test]
listen = 127.0.0.1:{self.port}
pm = static
pm.max_children = 2
catch_workers_output = yes
""")
        args = [php_fpm(), "--nodaemonize", "--allow-to-run-as-root", "--fpm-config", str(conf), "--prefix", str(tmp)]
        for setting in ini:
            args += ["-d", setting]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.workers = self._wait_ready()

    def _wait_ready(self) -> list[int]:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"php-fpm exited: {self.proc.stderr.read()[-2000:]!r} "
                                   f"{self.log.read_text()[-2000:] if self.log.exists() else ''}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
                if len(children) == 2 and self.pid_file.exists():
                    return sorted(int(c) for c in children)
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("php-fpm did not start its 2 workers in 20 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGQUIT)      # graceful: the master stops its workers
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        for pid in self.workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Clients:
    """Two threads sending ROUTES in turn to the pool until stopped; counts answers per route."""

    def __init__(self, port: int, scripts: dict[str, Path]) -> None:
        self.port = port
        self.scripts = scripts
        self.counts: Counter = Counter()
        self.served_by: Counter = Counter()
        self.files: Counter = Counter()
        self.errors: list[str] = []
        self.opcache: set[bool] = set()
        self.cached: Counter = Counter()      # answers per route whose script was in opcache's memory
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        params = {"GATEWAY_INTERFACE": "FastCGI/1.0", "REQUEST_METHOD": "GET", "SERVER_NAME": "127.0.0.1",
                  "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1"}
        while not self._stop.is_set():
            for route in ROUTES:
                script = self.scripts[route]
                where = {"SCRIPT_FILENAME": str(script), "SCRIPT_NAME": "/" + script.name,
                         "REQUEST_URI": f"/{script.name}?route={route}", "DOCUMENT_ROOT": str(script.parent)}
                try:
                    r = fcgi.request(("127.0.0.1", self.port), {**params, **where, "QUERY_STRING": f"route={route}"})
                    answer = json.loads(r.body)
                except (OSError, ValueError) as e:
                    self.errors.append(repr(e))
                    time.sleep(0.05)
                    continue
                if r.protocol_status != 0 or answer.get("route") != route or answer.get("sapi") != "fpm-fcgi":
                    self.errors.append(repr(r))
                    continue
                self.counts[route] += 1
                self.files[answer["file"]] += 1
                self.served_by[answer["pid"]] += 1
                self.opcache.add(bool(answer["opcache"]))
                self.cached[route] += bool(answer["cached"])

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)


def profile(pids: list[int], seconds: int, out: Path) -> PprofProfile:
    cmd = [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--sample-rate", "499", "--timeout", str(seconds),
           "--map-fetch-interval", "0", "-o", "pprof", "--file", str(out)]
    for pid in pids:
        cmd += ["--pid", str(pid)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    assert done.returncode == 0, done.stderr[-3000:]
    p = PprofProfile()
    p.ParseFromString(gzip.decompress(out.read_bytes()))
    return p


def stacks(p: PprofProfile) -> list[tuple[int, int, list[tuple[str, str, int]]]]:
    """(pid, value, frames root first as (name, file, line)) per sample."""
    s = p.string_table
    functions = {f.id: f for f in p.function}
    locations = {loc.id: loc for loc in p.location}
    out = []
    for sample in p.sample:
        pid = next(int(s[label.str]) for label in sample.label if s[label.key] == "pid")
        frames = []
        for lid in sample.location_id:          # leaf first
            for line in reversed(locations[lid].line):
                f = functions[line.function_id]
                frames.append((s[f.name], s[f.filename], line.line))
        out.append((pid, sample.value[0], frames[::-1]))
    return out


@pytest.mark.shares
@pytest.mark.parametrize("opcache", ["default", "off"])
def test_fpm_pool_request_handlers(tmp_path, opcache):
    # opcache does not keep a script whose file changed in the last opcache.file_update_protection
    # seconds (2 s), which a checkout made just before (or a clock behind the file's time) makes of
    # every request: each would compile the script again, as with opcache off. Not what this case
    # is about, so that setting alone is changed.
    pool = Pool(tmp_path, *(["opcache.enable=0"] if opcache == "off" else ["opcache.file_update_protection=0"]))
    clients = None
    try:
        clients = Clients(pool.port, SCRIPTS)
        time.sleep(0.5)
        p = profile(pool.workers, 8, tmp_path / "fpm.pb.gz")
    finally:
        if clients is not None:
            clients.stop()
        pool.stop()
    assert not clients.errors, clients.errors[:5]
    assert sum(clients.counts.values()) >= 100, clients.counts
    assert set(clients.served_by) <= set(pool.workers) and len(clients.served_by) == 2, clients.served_by
    assert clients.files == Counter({str(SCRIPTS[r]): n for r, n in clients.counts.items()}), clients.files
    assert clients.opcache == ({False} if opcache == "off" else {True}), clients.opcache
    if opcache == "default":        # every request but each worker's first ones ran the cached script
        assert all(clients.cached[r] >= clients.counts[r] - 4 for r in SCRIPTS), (clients.cached, clients.counts)
    built = 100.0 * clients.counts["report"] / sum(clients.counts.values())

    by_file = {str(path): route for route, path in SCRIPTS.items()}
    per_route: Counter = Counter()
    workers_seen = set()
    period = p.period or 1
    unknown = no_line = 0
    for pid, value, frames in stacks(p):
        assert pid in pool.workers, pid
        assert not any(f[0] == "[php jit]" for f in frames), frames      # Debian's php.ini: no JIT
        if any(f[0] == "[unknown php]" for f in frames):
            unknown += value        # bounded below; the known frames' order is not checked: an
            continue                # unknown {main} leaves the handlers as the chain's root
        php = [f for f in frames if f[1] in by_file]
        if not php:
            continue
        routes = {by_file[f[1]] for f in php}
        assert len(routes) == 1, frames          # one request's script: never a frame of the other one
        route = routes.pop()
        names = [f[0] for f in php]
        chain, below = CHAINS[route], BELOW[route]
        if len(names) < 3:
            assert names == chain[:len(names)], frames
            continue
        # caller order, root first; then the handler's callees; lines inside each function's body
        assert names[:3] == chain and set(names[3:]) <= set(below) and names[3:] == list(below[:len(names) - 3]), frames
        script = SCRIPTS[route]
        for name, _file, line in php:
            if name == "{main}":
                assert line > function_lines(script, "dispatch").stop, (name, line)
            elif line == 0:         # just entered: the frame's opline slot not yet stored (source.py)
                no_line += value
            else:
                assert line in function_lines(script, name.rpartition("::")[2]), (name, line)
        per_route[route] += value
        workers_seen.add(pid)
    total = sum(per_route.values())
    assert total / period >= 300, f"only {total / period:.0f} samples in the handlers: {per_route}"
    # A sample with an unknown frame is of either route (bounded below): the split is right if some
    # sharing of those samples between the routes puts handle_report within 5 points of its requests.
    low = 100.0 * per_route["report"] / (total + unknown)
    high = 100.0 * (per_route["report"] + unknown) / (total + unknown)
    assert low - 5 <= built <= high + 5, (f"handle_report has {low:.1f}-{high:.1f}% of handler samples; "
                                          f"requests: {built:.1f}%; {per_route}, unknown {unknown}, no line {no_line}")
    assert workers_seen == set(pool.workers), workers_seen
    # a frame whose function was gone when it was read is unknown, never another's name: few of them
    assert unknown <= 0.05 * total, f"{unknown / period:.0f} samples with unknown PHP frames of {total / period:.0f}"
    # a frame's line is unknown only in the few opcodes between its entry and its first stored opline
    assert no_line <= 0.01 * total, f"{no_line / period:.0f} samples with a frame of no line of {total / period:.0f}"
