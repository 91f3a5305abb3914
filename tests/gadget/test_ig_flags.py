"""`ig run`'s generic flags a user's scripts pass: --filter-expr (expr-lang), -r/--runtimes,
--uid/--gid; an ig flag hotstack does not have is one error naming it (exit 2)."""

from __future__ import annotations

import pytest

from hotstack.errors import ConfigError
from hotstack.gadget.filter_expr import compile_filter_expr
from hotstack.gadget.profile_cpu import samples_datasource
from hotstack.profile.model import Frame, Sample

DS = samples_datasource()


def sample(comm: str, pid: int, stack=("leaf", "main"), value: int = 1) -> Sample:
    return Sample(tuple(Frame(n) for n in stack), value, pid, pid, comm)


ROWS = [sample("nginx", 10), sample("python3", 200, ("slow", "main")), sample("kworker/0", 3, ()),
        sample("nginx", 300, ("accept", "main"), 7)]


@pytest.mark.parametrize("expr, kept", [
    ('proc.comm == "nginx"', [0, 3]),
    ("proc.comm == 'nginx' && proc.pid > 100", [3]),
    ('proc.comm == "nginx" and proc.pid > 100', [3]),
    ('proc.pid >= 200 || proc.comm startsWith "kwork"', [1, 2, 3]),
    ('!(proc.comm == "nginx")', [1, 2]),
    ('not (proc.comm in ["nginx", "python3"])', [2]),
    ('proc.comm not in ["nginx"]', [1, 2]),
    ('proc.comm matches "^py.*3$"', [1]),
    ('user_stack_raw.symbols contains "accept"', [3]),
    ('proc.comm endsWith "x" or samples == 7', [0, 3]),
    ("proc.pid < -1 || proc.pid != 10 && samples <= 1", [1, 2]),
    ("true", [0, 1, 2, 3]),
])
def test_filter_expr_keeps_the_rows_where_it_holds(expr, kept):
    keep = compile_filter_expr(expr, DS)
    assert [i for i, s in enumerate(ROWS) if keep(s)] == kept


@pytest.mark.parametrize("expr, fragment", [
    ('proc.command == "x"', "has no field 'proc.command'"),
    ('proc.pid == "ten"', "proc.pid is uint32, compared with 'ten'"),
    ('proc.comm == "a" &&', "unexpected end"),
    ('proc.comm = "a"', "cannot read this"),
    ('proc.comm matches "("', "bad regular expression"),
    ("proc.pid + 1 > 2", "cannot read this at column 10 ('+ 1 > 2')"),
    ("proc.pid > 1 2", "unexpected text at column 14"),
    ("", "expected an expression"),
])
def test_bad_filter_expr_is_one_config_error(expr, fragment):
    with pytest.raises(ConfigError) as e:
        compile_filter_expr(expr, DS)
    assert fragment in str(e.value) and "--filter-expr" in str(e.value) and "\n" not in str(e.value), str(e.value)


BUSY = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"


def _json_rows(stdout: str) -> list[dict]:
    """-o json's rows (one object a line, fields nested by their dots), as flat dicts."""
    import json

    def flat(obj: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
        return out
    return [flat(json.loads(line)) for line in stdout.splitlines() if line.startswith("{")]


@pytest.mark.root
def test_uid_gid_and_filter_expr_select_rows_of_a_real_run(workloads):
    import shutil
    import sys

    from ..conftest import hotstack
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed"
    nobody = workloads([setpriv, "--reuid=65534", "--regid=65533", "--clear-groups", sys.executable, "-c", BUSY])
    root = workloads([sys.executable, "-c", BUSY])
    common = ["run", "profile_cpu", "--host", "-o", "json", "--map-fetch-interval", "0", "--timeout", "2"]
    for flag, value, field in (("--uid", "65534", "proc.creds.uid"), ("--gid", "65533", "proc.creds.gid")):
        r = hotstack(*common, flag, value)
        assert r.returncode == 0, r.stderr
        rows = _json_rows(r.stdout)
        assert rows and all(row[field] == int(value) for row in rows), (flag, rows[:3])
        pids = {row["proc.pid"] for row in rows}
        assert nobody.pid in pids and root.pid not in pids, (flag, pids)
    r = hotstack(*common, "--filter-expr", f"proc.pid == {root.pid} || proc.creds.uid == 65534 && proc.pid < 0")
    assert r.returncode == 0, r.stderr
    assert {row["proc.pid"] for row in _json_rows(r.stdout)} == {root.pid}, r.stdout[-2000:]


@pytest.mark.parametrize("args, fragment", [
    (["--k8s-selector", "app=web"], "--k8s-selector: an ig run flag that hotstack run does not have"),
    (["--tid", "5"], "--tid: an ig run flag that hotstack run does not have"),
    (["--collect-ustack=false"], "--collect-ustack=false: hotstack always collects user stacks"),
    (["-r", "docker,rkt"], "--runtimes 'docker,rkt': unknown runtime 'rkt'"),
    (["--uid", "-1"], "--uid -1: expected an id"),
    (["--filter-expr", "proc.pid >"], "--filter-expr 'proc.pid >': unexpected end"),
])
def test_ig_flags_hotstack_lacks_or_bad_values_are_one_line(args, fragment):
    from ..conftest import hotstack
    r = hotstack("run", "profile_cpu", "--timeout", "1", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and fragment in r.stderr, r.stderr


def test_collect_ustack_true_is_accepted(capsys):
    from hotstack.cli import build_parser
    from hotstack.gadget.cli import check_flags
    args = build_parser("run").parse_args(["run", "profile_cpu", "--collect-ustack"])
    check_flags(args)    # no error: hotstack always collects user stacks


def test_runtimes_ask_only_the_named_runtimes_in_order(monkeypatch):
    from hotstack.containers import named_runtimes
    from hotstack.containers.cri import CRIRuntime
    from hotstack.containers.docker import DockerRuntime
    monkeypatch.delenv("CONTAINER_RUNTIME_ENDPOINT", raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/d.sock")
    asked = named_runtimes(["cri-o", "podman", "docker"]).runtimes
    assert [(type(r), r.endpoint) for r in asked] == [(CRIRuntime, "/var/run/crio/crio.sock"),
                                                       (DockerRuntime, "/run/podman/podman.sock"),
                                                       (DockerRuntime, "/tmp/d.sock")]


@pytest.mark.root
def test_runtimes_decide_which_containers_are_named_and_in_scope(docker_engine, spin_image):
    """-r docker: the Docker container's process is in ig's default scope, named; -r containerd
    (no containerd here): Docker is not asked, so nothing names it and it is out of scope."""
    import os
    import subprocess
    import sys
    docker_engine.run(spin_image, "hotstack-runtimes-app", ["/spin"])
    pid = docker_engine.pid("hotstack-runtimes-app")
    env = {**os.environ, "DOCKER_HOST": docker_engine.host, "CONTAINER_RUNTIME_ENDPOINT": "unix:///nonexistent/cri.sock"}
    argv = [sys.executable, "-m", "hotstack", "run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "2",
            "-o", "json"]
    r = subprocess.run([*argv, "-r", "docker"], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    named = {row["runtime.containerName"] for row in _json_rows(r.stdout) if row["proc.pid"] == pid}
    assert named == {"hotstack-runtimes-app"}, r.stdout[-2000:]
    r = subprocess.run([*argv, "-r", "containerd"], capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    assert pid not in {row["proc.pid"] for row in _json_rows(r.stdout)}, r.stdout[-2000:]
