"""`pip install .` must give a working package: the committed BPF objects and the viewer page's
template ship inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_bpf_objects_and_entry_point(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("hotstack-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(p.name for p in (ROOT / "src" / "hotstack" / "bpf").glob("*.bpf.c"))
    assert sources
    for source in sources:
        assert f"hotstack/bpf/{source[:-2]}.o" in names, source
        assert f"hotstack/bpf/{source}" in names, source
    assert "hotstack/profile/ui_page.html" in names      # the viewer page's template (package data)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hotstack = hotstack.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
