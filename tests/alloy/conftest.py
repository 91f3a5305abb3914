"""Fixtures of the Alloy tests: the spin workload, a container-like cgroup, the peers, the agent."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import compile_c
from .peers import PyroscopeServer, free_port

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"


@pytest.fixture(scope="session")
def spin_binary(build_dir) -> Path:
    return compile_c(HERE / "workloads" / "spin.c", build_dir / "alloy-spin", "-O1", "-g",
                     "-fno-omit-frame-pointer")


@pytest.fixture
def pyroscope():
    server = PyroscopeServer()
    yield server
    server.close()


def _cgroup_root() -> Path:
    """Where the test may create a cgroup: the unified (v2) hierarchy, or a v1 one on hybrid hosts."""
    for candidate in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    return Path("/sys/fs/cgroup/pids")


class ContainerCgroup:
    """A cgroup named like a container runtime's (e.g. cri-containerd-<64hex>.scope), and processes
    started inside it from their first instruction (the shell joins the cgroup, then execs)."""

    def __init__(self, style: str) -> None:
        self.id = secrets.token_hex(32)
        self.parent = _cgroup_root() / f"hotstack-test-{os.getpid()}-{self.id[:8]}"
        name = {"containerd": f"cri-containerd-{self.id}.scope", "docker": f"docker-{self.id}.scope",
                "crio": f"crio-{self.id}.scope"}[style]
        self.path = self.parent / name
        self.path.mkdir(parents=True)
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str]) -> subprocess.Popen:
        script = f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"'
        p = subprocess.Popen(["sh", "-c", script, "sh", *map(str, argv)], stdout=subprocess.DEVNULL)
        self.procs.append(p)
        time.sleep(0.2)
        return p

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        for d in (self.path, self.parent):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)   # the killed processes are leaving the cgroup


@pytest.fixture
def container_cgroup():
    made: list[ContainerCgroup] = []

    def make(style: str = "containerd") -> ContainerCgroup:
        c = ContainerCgroup(style)
        made.append(c)
        return c

    yield make
    for c in made:
        c.cleanup()


class AgentProcess:
    """`hotstack agent CONFIG` run as a user runs it, with its HTTP server on a free port."""

    def __init__(self, config: str | None, tmp: Path, extra: list[str] | None = None, env: dict | None = None,
                 prefix: list[str] | None = None) -> None:
        self.port = free_port()
        args = []
        if config is not None:   # None: the built-in pipeline
            path = tmp / "agent.alloy"
            path.write_text(config)
            args.append(str(path))
        self.log = tmp / "agent.log"
        cmd = [*(prefix or []), sys.executable, "-m", "hotstack", "agent", *args,
               "--server.http.listen-addr", f"127.0.0.1:{self.port}", *(extra or [])]
        self.logf = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def json(self, path: str) -> object:
        return json.loads(self.get(path)[1])

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited ({self.proc.returncode}): {self.log.read_text()}")
            try:
                if self.get("/-/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"agent not ready: {self.log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


@pytest.fixture
def agent(tmp_path):
    started: list[AgentProcess] = []

    def start(config: str | None, extra: list[str] | None = None, env: dict | None = None,
              prefix: list[str] | None = None) -> AgentProcess:
        a = AgentProcess(config, tmp_path, extra, env, prefix)
        started.append(a)
        return a

    yield start
    for a in started:
        a.stop()


def seed_config(name: str) -> str:
    return (CONFIGS / name).read_text()
