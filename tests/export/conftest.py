"""Fixtures of the export tests: the known workload, Go's pprof, peers started and stopped by pid."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import built_workload
from .collectors import require_peer

HERE = Path(__file__).resolve().parent
# The seed guide's ig-config.yaml: one OTLP gRPC exporter, gzip, plain text to `endpoint`
SEED_GUIDE_CONFIG = """\
# ig-config.yaml
operator:
  otel-profiles:
    exporters:
      my-profiles-exporter:
        exporter: otlp-grpc
        compression: gzip
        endpoint: "{endpoint}"
        insecure: true
"""
# main -> export_outer -> export_leaf (user CPU) and export_syscalls (kernel CPU)
export_busy = built_workload(HERE, "export_busy", "-Wl,--build-id")


@pytest.fixture(scope="session")
def go_pprof() -> list[str]:
    """`go tool pprof` (comes with the Go toolchain)."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None)
    require_peer(Path(go) if go else None, "the Go toolchain (go tool pprof)")
    return [go, "tool", "pprof"]


def pprof(go_pprof: list[str], *args: str) -> str:
    r = subprocess.run([*go_pprof, *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PPROF_TMPDIR": os.environ.get("TMPDIR", "/tmp")})
    assert r.returncode == 0, r.stderr
    return r.stdout
