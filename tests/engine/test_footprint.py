"""What a run of the profiler loads: no OpenSSL for its content hashes (content_hash.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.root


def test_a_run_that_names_user_stacks_loads_no_openssl(hot_ab, workloads):
    w = workloads([hot_ab])
    # -X importtime lists every module the run imports, those imported late (when the samples'
    # files are read for symbols and hashed) included
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "hotstack", "run", "profile_cpu", "--host",
                        "--pid", str(w.pid), "--timeout", "3", "-o", "folded"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "hot_a" in r.stdout, r.stdout[:2000]       # named from the ELF's symbols
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert {"hotstack.symbols.module_files", "hotstack.ebpf.btf", "hotstack.unwind.kernel_tables"} <= imported
    assert "_hashlib" not in imported and "hashlib" not in imported
