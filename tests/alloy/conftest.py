"""Fixtures of the Alloy tests: the spin workload, the peers, the agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from ..conftest import compile_c, stop_gently, wait_ready
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


class AgentProcess:
    """`hotstack agent CONFIG` run as a user runs it, with its HTTP server on a free port."""

    def __init__(self, config: str | None, tmp: Path, extra: list[str] | None = None, env: dict | None = None,
                 prefix: list[str] | None = None, listen_host: str = "127.0.0.1") -> None:
        """`listen_host`: where the server listens (0.0.0.0: every address, as the DaemonSet's);
        the test's own requests go to 127.0.0.1 either way."""
        self.port = free_port()
        args = []
        if config is not None:   # None: the built-in pipeline
            path = tmp / "agent.alloy"
            path.write_text(config)
            args.append(str(path))
        self.log = tmp / "agent.log"
        cmd = [*(prefix or []), sys.executable, "-m", "hotstack", "agent", *args,
               "--server.http.listen-addr", f"{listen_host}:{self.port}", *(extra or [])]
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
        wait_ready(self.proc, lambda: self.get("/-/ready")[0] == 200, "agent", self.log.read_text, timeout)

    def stop(self) -> int:
        stop_gently(self.proc, 120)
        self.logf.close()
        return self.proc.returncode


@pytest.fixture
def agent(tmp_path):
    started: list[AgentProcess] = []

    def start(config: str | None, extra: list[str] | None = None, env: dict | None = None,
              prefix: list[str] | None = None, listen_host: str = "127.0.0.1") -> AgentProcess:
        a = AgentProcess(config, tmp_path, extra, env, prefix, listen_host)
        started.append(a)
        return a

    yield start
    for a in started:
        a.stop()


def seed_config(name: str) -> str:
    return (CONFIGS / name).read_text()


def started(cfg: str):
    """The controller of Alloy configuration text `cfg`, loaded and started (the test stops it)."""
    from hotstack.alloy.controller import load_config
    c = load_config(cfg, "t.alloy")
    c.start()
    return c


@contextmanager
def running(cfg: str):
    """The controller of Alloy configuration text `cfg`, started, and stopped when the block ends."""
    c = started(cfg)
    try:
        yield c
    finally:
        c.stop()
