"""What `hotstack run profile_cpu` imports: a table-printing run loads no gRPC, protobuf, TLS or YAML
(bench/startup.py: ~0.1-0.35 s of start-up each time one crept in); an export still loads them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.root
HEAVY = ("grpc", "google.protobuf", "ssl", "yaml")


def imported(*args: str) -> set[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "hotstack", *args], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", r.stderr, re.M))


def test_a_table_run_imports_no_exporter_libraries():
    # --host: the whole host's table; a default run asks the runtimes (CRI over gRPC) about
    # container processes, where the host has any
    modules = imported("run", "profile_cpu", "--host", "--map-fetch-interval", "0", "--timeout", "1")
    assert "hotstack.sampling.engine" in modules      # the measure works: the engine ran
    assert not [m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY], sorted(
        m for m in modules if m.split(".")[0] in ("grpc", "google", "ssl", "yaml"))


def test_a_file_export_still_loads_its_encoder(tmp_path):
    modules = imported("run", "profile_cpu", "--host", "--map-fetch-interval", "0", "--timeout", "1", "-o", "pprof", "--file", str(tmp_path / "p.pb.gz"))
    assert "google.protobuf" in modules and (tmp_path / "p.pb.gz").exists()
