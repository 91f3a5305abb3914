"""`hotstack run`'s default scope is `ig run`'s: without --host only processes in containers that
the host's runtimes know (their mount namespace is not the host's and their cgroup names a
container the runtime has), with --host every process; an explicit --pid is always in scope."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hotstack.gadget.scope import ContainerScope
from hotstack.procs import ProcessInfo

from ..conftest import hotstack
from .conftest import json_rows

HINT = "no container process was sampled"
# Each gadget with a host workload it records: one on the CPU, one that sleeps.
SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(0.005)"]
GADGETS = {"profile_cpu": None, "profile_offcpu": SLEEPER}


def _pids(stdout: str) -> set[int]:
    return {row["proc"]["pid"] for row in json_rows(stdout)}


def _no_runtimes() -> dict:
    """An environment in which no container runtime answers: a host without containers."""
    return {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock",
            "CONTAINER_RUNTIME_ENDPOINT": "unix:///nonexistent/cri.sock"}


# -- the decision, on processes described by hand ---------------------------------------------------

class _Table:
    def __init__(self, *processes: ProcessInfo) -> None:
        self.by_pid = {p.pid: p for p in processes}

    def get(self, pid: int):
        return self.by_pid.get(pid)


CID = "a" * 64


def test_a_process_is_in_a_container_when_its_runtime_knows_it_and_its_mount_namespace_is_its_own():
    asked = []

    def known(cid):
        asked.append(cid)
        return object() if cid == CID else None
    table = _Table(ProcessInfo(10, 1, "app", container_id=CID, mntns=5),          # a container's
                   ProcessInfo(11, 1, "sshd", mntns=4),                           # the host's
                   ProcessInfo(12, 1, "unshared", mntns=6),                       # unshare -m: no container
                   ProcessInfo(13, 1, "fake", container_id=CID, mntns=4),         # a container's cgroup, host mounts
                   ProcessInfo(14, 1, "new", container_id="b" * 64, mntns=7),     # id no runtime knows (yet)
                   ProcessInfo(15, 1, "nsenter", mntns=5))                        # joined 10's mounts only
    scope = ContainerScope(table, known=known, host_mntns=4)
    assert [scope.wants(pid) for pid in (10, 11, 12, 13, 14, 15, 99)] == [True, False, False, False, False, True, False]
    # a known container is decided once; an id no runtime knows is asked again (it may be starting)
    scope.wants(10), scope.wants(14)
    assert asked.count(CID) == 1 and asked.count("b" * 64) == 2


# -- as a user runs it --------------------------------------------------------------------------------

@pytest.mark.root
@pytest.mark.parametrize("gadget", GADGETS)
def test_default_run_leaves_host_processes_out_and_says_so(workloads, static_spin, gadget):
    """A host with no containers: a default run shows no host process (one in its own mount
    namespace neither) and says in one stderr line that --host profiles the host; --host shows them."""
    workload = GADGETS[gadget] or [str(static_spin)]
    plain = workloads(workload)
    unshared = workloads(["unshare", "-m", "--propagation", "private", *workload])
    argv = ["run", gadget, "--map-fetch-interval", "0", "--timeout", "3", "-o", "json"]
    r = hotstack(*argv, env=_no_runtimes(), timeout=180)
    assert r.returncode == 0, r.stderr
    assert _pids(r.stdout) == set(), r.stdout[:2000]
    hints = [line for line in r.stderr.splitlines() if HINT in line]
    assert len(hints) == 1 and "--host" in hints[0], r.stderr

    r = hotstack(*argv, "--host", env=_no_runtimes(), timeout=180)
    assert r.returncode == 0, r.stderr
    assert {plain.pid, unshared.pid} <= _pids(r.stdout), r.stdout[:2000]
    assert HINT not in r.stderr


@pytest.mark.root
def test_explicit_pid_is_in_scope_without_host(workloads, static_spin):
    w = workloads([static_spin])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "2", "--pid", str(w.pid), "-o", "json",
                 env=_no_runtimes(), timeout=180)
    assert r.returncode == 0, r.stderr
    assert _pids(r.stdout) == {w.pid}
    assert HINT not in r.stderr


@pytest.mark.root
def test_columns_footer_counts_what_the_scope_left_out(workloads, static_spin):
    workloads([static_spin])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "2", env=_no_runtimes(), timeout=180)
    assert r.returncode == 0, r.stderr
    assert "samples of processes outside containers left out (--host for them)" in r.stdout.splitlines()[-1], r.stdout


@pytest.mark.root
def test_default_run_shows_a_docker_container_and_not_the_host(docker_engine, spin_image, static_spin, workloads):
    host_spin = workloads([static_spin])
    docker_engine.run(spin_image, "hotstack-scope-app", ["/spin"])
    pid = docker_engine.pid("hotstack-scope-app")
    # a process that joins the container's mount namespace (and root) from the host, not its cgroup
    joined = workloads(["nsenter", "-t", str(pid), "-m", "-r", "/spin"])
    env = {**os.environ, "DOCKER_HOST": docker_engine.host}
    argv = [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "3", "-o", "json"]

    r = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    rows = json_rows(r.stdout)
    assert {pid, joined.pid} <= {row["proc"]["pid"] for row in rows}, r.stdout[:2000]
    assert host_spin.pid not in {row["proc"]["pid"] for row in rows}
    assert all(row["runtime"]["containerId"] or row["proc"]["pid"] == joined.pid for row in rows), \
        "a host process in the default scope"
    assert {row["runtime"]["containerName"] for row in rows if row["proc"]["pid"] == pid} == {"hotstack-scope-app"}
    assert HINT not in r.stderr

    r = subprocess.run([*argv, "--host"], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    assert {pid, host_spin.pid} <= {row["proc"]["pid"] for row in json_rows(r.stdout)}

    # -c with --host narrows to that container; '!name' keeps the host and the other containers
    r = subprocess.run([*argv, "--host", "-c", "!hotstack-scope-app"], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    seen = {row["proc"]["pid"] for row in json_rows(r.stdout)}
    assert host_spin.pid in seen and pid not in seen

