"""The flame graph page in headless Chromium: it renders, the frames are in the DOM, zoom and search work."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hotstack.profile.flamegraph import render_flamegraph
from hotstack.profile.model import Frame, FrameKind, Profile, Sample

from ..conftest import hotstack
from .collectors import require_peer

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1200,900"]
FRAME = re.compile(r'<div class="frame[^"]*"[^>]*?data-name="([^"]*)" data-samples="(\d+)"[^>]*style="([^"]*)"')


def dump_dom(page: Path, fragment: str, profile_dir: Path) -> str:
    chromium = require_peer(Path(shutil.which("chromium") or "/usr/bin/chromium"), "Debian's chromium")
    r = subprocess.run([str(chromium), *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "--dump-dom",
                        page.as_uri() + fragment], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def frames(dom: str) -> dict[str, tuple[int, float]]:
    """name -> (samples, width in px) of the widest frame with that name."""
    out: dict[str, tuple[int, float]] = {}
    for name, samples, style in FRAME.findall(dom):
        width = float(re.search(r"width: ([\d.]+)px", style).group(1))
        if name not in out or width > out[name][1]:
            out[name] = (int(samples), width)
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    k = Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]", 1)
    spin, main, other = Frame("spin"), Frame("main"), Frame("other_branch")
    p = Profile([Sample((k, spin, main), 10, 1, 1, "busy"), Sample((spin, main), 30, 1, 1, "busy"),
                 Sample((other, main), 20, 1, 1, "busy")], 0, 10**9, 49)
    path = tmp_path_factory.mktemp("fg") / "graph.html"
    path.write_text(render_flamegraph(p))
    return path


def test_page_is_self_contained(page):
    text = page.read_text()
    assert not re.search(r'(src|href)=["\']?(https?:)?//', text)
    assert "<script src" not in text and "@import" not in text


def test_renders_all_frames(page, tmp_path):
    dom = dump_dom(page, "", tmp_path / "chromium")
    f = frames(dom)
    assert {"all", "busy", "main", "spin", "other_branch", "do_syscall_64"} <= set(f)
    assert f["spin"][0] == 40 and f["other_branch"][0] == 20
    # Widths are proportional to samples: spin is twice other_branch.
    assert abs(f["spin"][1] / f["other_branch"][1] - 2) < 0.01
    # The hover text: samples and share of the total.
    assert 'aria-label="spin (40 samples, 66.67%)"' in dom


def test_click_zoom_and_search(page, tmp_path):
    dom = dump_dom(page, "#zoom=spin&search=do_sys", tmp_path / "chromium")
    assert 'data-zoom="spin"' in dom
    f = frames(dom)
    assert f["spin"][1] == f["all"][1]           # the clicked frame now spans the whole width
    assert "other_branch" not in f               # frames outside it are gone
    assert f["do_syscall_64"][1] == pytest.approx(f["all"][1] / 4, rel=0.01)
    assert "Matched: 16.67%" in dom               # 10 of 60 samples
    assert re.search(r'class="frame match"[^>]*data-name="do_syscall_64"', dom)


@pytest.mark.root
def test_run_profile_cpu_flamegraph_of_the_workload(export_busy, workloads, tmp_path):
    w = workloads([export_busy])
    out = tmp_path / "out.html"
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "3", "--sample-rate", "99",
                 "-o", "flamegraph", "--file", str(out))
    assert r.returncode == 0, r.stderr
    dom = dump_dom(out, "#zoom=export_outer", tmp_path / "chromium")
    f = frames(dom)
    assert {"export_busy", "main", "export_outer", "export_leaf"} <= set(f), sorted(f)
    assert 'data-zoom="export_outer"' in dom and f["export_outer"][1] == f["all"][1]
