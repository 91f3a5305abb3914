"""The profile viewer (profile/ui.py) in headless Chromium, driven over the DevTools protocol with
real mouse and key events: the agent's page over a real workload whose hot function changes half
way (timeline per service, flame graph and table linked, search, zoom, range selection, diff,
label filter, downloads read back by `go tool pprof`), and `-o flamegraph`'s file of a real run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..alloy.conftest import agent  # noqa: F401  (the agent fixture: `hotstack agent` on a free port)
from ..cdp import Browser
from ..conftest import compile_c, hotstack
from ..peers import require_tool
from ..screenshots import png_size, publish

pytestmark = pytest.mark.root
HERE = Path(__file__).resolve().parent
FP = ("-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls")

PIPELINE = """
discovery.process "all" {
  refresh_interval = "1s"
}
discovery.relabel "services" {
  targets = discovery.process.all.targets
  rule {
    action        = "keep"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/ui-(phases|other)$"
  }
  rule {
    action        = "replace"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/([^/]+)$"
    target_label  = "service_name"
  }
}
pyroscope.ebpf "default" {
  targets          = discovery.relabel.services.output
  forward_to       = [hotstack.local_store.default.receiver]
  collect_interval = "2s"
}
hotstack.local_store "default" {
  directory = %s
  window    = "10m"
}
"""


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ui")
    return {"phases": compile_c(HERE / "workloads" / "phases.c", d / "ui-phases", *FP),
            "other": compile_c(HERE.parent / "top" / "workloads" / "top_busy.c", d / "ui-other", *FP)}


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium", 1440, 900)
    yield b
    b.close()


def frames(b: Browser) -> dict[str, dict]:
    """name -> the widest frame's {samples, width, classes, background} in the page's graph."""
    return b.js("""(() => { const out = {};
        document.querySelectorAll('#graph .frame').forEach(el => {
          const n = el.getAttribute('data-name'), w = el.getBoundingClientRect().width;
          if (!out[n] || w > out[n].width) out[n] = {samples: +el.getAttribute('data-samples'), width: w,
            classes: el.className, background: el.style.background, label: el.getAttribute('aria-label')};
        }); return out; })()""")


def table(b: Browser) -> list[list[str]]:
    return b.js("Array.from(document.querySelectorAll('#functions-body tr')).map("
                "tr => Array.from(tr.children).map(td => td.textContent))")


def _pushes(directory: Path) -> int:
    return len(list(directory.glob("*.pb.gz"))) if directory.exists() else 0


def timeline_x(b: Browser, t_ms: float) -> float:
    lo, hi = b.js("hotstackUI.bounds()")
    box = b.js("(() => { const r = document.getElementById('timeline').getBoundingClientRect();"
               " return [r.x, r.width, r.y + r.height / 2]; })()")
    return box[0] + (t_ms - lo) / (hi - lo) * box[1], box[2]


def test_agent_page_timeline_graph_table_search_zoom_diff_filter_download(binaries, workloads, agent, tmp_path,
                                                                         browser):
    go = require_tool("go")
    phases = workloads([binaries["phases"]])
    workloads([binaries["other"], "0"])
    a = agent(PIPELINE % json.dumps(str(tmp_path / "store")))
    a.wait_ready()

    def pushed(name: str, count: int, timeout: float = 150) -> None:
        """Wait until `name` is in at least `count` of the store's pushes (every 2 s)."""
        deadline = time.monotonic() + timeout
        while True:
            tree = a.json("/flamegraph?format=json&minutes=10")
            if json.dumps(tree).count(f'"{name}"') >= 1 and _pushes(tmp_path / "store" / "ui-phases") >= count:
                return
            assert time.monotonic() < deadline, f"no {name} in the store: {a.log.read_text()[-2000:]}"
            time.sleep(0.5)

    pushed("phase_a", 4)
    before = _pushes(tmp_path / "store" / "ui-phases")
    switch_ms = time.time() * 1000
    os.kill(phases.pid, signal.SIGUSR1)
    pushed("phase_b", before + 5)
    pushed("top_spin", 0)

    b = browser
    b.open(a.url("/flamegraph?minutes=10"))
    assert b.errors == []
    f = frames(b)
    assert {"all", "ui-phases", "ui-other", "run_phases", "phase_a", "phase_b", "top_spin"} <= set(f), sorted(f)
    assert b.js("Array.from(document.querySelectorAll('#legend [data-series]')).map(e => e.dataset.series)") \
        [:2] in (["ui-phases", "ui-other"], ["ui-other", "ui-phases"])
    assert b.js("document.querySelectorAll('#timeline rect.bar').length") > 5
    names = [row[0] for row in table(b)]
    assert {"phase_a", "phase_b", "top_spin", "run_phases"} <= set(names)
    shot = b.screenshot(tmp_path / "ui-all.png")
    assert png_size(shot) == (1440, 900)

    # Search (typed in the box): matching frames highlighted, the share shown, the table filtered.
    b.click_on("#search")
    b.type("phase_")
    b.wait_for("document.getElementById('matched').textContent.startsWith('Matched:')")
    f = frames(b)
    assert "match" in f["phase_a"]["classes"] and "match" in f["phase_b"]["classes"]
    assert "match" not in f["top_spin"]["classes"]
    assert sorted(row[0] for row in table(b)) == ["phase_a", "phase_b"]
    b.js("hotstackUI.search('')")

    # Zoom: a real click on run_phases' frame; it spans the graph, the other service is gone,
    # the table holds only its subtree and has the function selected.
    b.click_on('#graph .frame[data-name="run_phases"]')
    b.wait_for("document.getElementById('graph').dataset.zoom === 'run_phases'")
    f = frames(b)
    assert abs(f["run_phases"]["width"] - f["all"]["width"]) < 1 and "top_spin" not in f
    assert "top_spin" not in [row[0] for row in table(b)]
    assert b.js("document.querySelector('tr.fn.selected').dataset.name") == "run_phases"
    # Linked the other way: a click on a table row marks that function's frames.
    b.click_on('tr.fn[data-name="phase_b"] td')
    b.wait_for("hotstackUI.state().selected === 'phase_b'")
    assert b.js("Array.from(document.querySelectorAll('#graph .frame.selected')).map(e => e.dataset.name)") \
        == ["phase_b"]
    b.key("Escape", 27)
    b.wait_for("document.getElementById('graph').dataset.zoom === 'all'")

    # Range selection by dragging on the timeline: phase A only.
    x0, y = timeline_x(b, b.js("hotstackUI.bounds()")[0])
    x1, _ = timeline_x(b, switch_ms - 1500)
    b.drag(x0 + 1, y, x1, y)
    state = b.wait_for("hotstackUI.state().rangeA && hotstackUI.state()")
    f = frames(b)
    assert "phase_a" in f and f["phase_a"]["samples"] > 0
    assert f.get("phase_b", {"samples": 0})["samples"] <= f["phase_a"]["samples"] / 10, f
    # Compare: B = phase B; the graph turns into a diff, phase_b red (grew), phase_a green.
    b.click_on("#compare")
    x2, _ = timeline_x(b, switch_ms + 2500)
    x3, _ = timeline_x(b, b.js("hotstackUI.bounds()")[1])
    b.drag(x2, y, x3 - 1, y)
    state = b.wait_for("hotstackUI.state().diff && hotstackUI.state()")
    assert state["totalA"] > 0 and state["totalB"] > 0
    assert b.js("document.getElementById('graph').dataset.mode") == "diff"
    f = frames(b)
    hue = lambda c: int(re.match(r"rgb\((\d+), (\d+), (\d+)\)", c).group(1)) - int(re.match(r"rgb\((\d+), (\d+)", c).group(2))
    assert hue(f["phase_b"]["background"]) > 40, f["phase_b"]      # red: grew from A to B
    assert hue(f["phase_a"]["background"]) < -40, f["phase_a"]     # green: shrank
    rows = {row[0]: row for row in table(b)}
    assert float(rows["phase_b"][3]) > 10 and float(rows["phase_a"][3]) < -10, rows
    assert "+" in f["phase_b"]["label"] and "pts" in f["phase_b"]["label"]
    b.screenshot(tmp_path / "ui.png")
    publish(tmp_path / "ui.png", "ui.png")

    # Label filter: only the other service.
    b.click_on("#clear-range")
    b.js("(() => { const s = document.querySelector('select[data-label=\"service_name\"]');"
         " s.value = 'ui-other'; s.dispatchEvent(new Event('change')); })()")
    f = frames(b)
    assert "top_spin" in f and "phase_a" not in f and "ui-phases" not in f

    # Downloads, by clicking the links: folded, and pprof read back by go tool pprof.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    b.send("Browser.setDownloadBehavior", session=False, behavior="allow", downloadPath=str(downloads))
    b.click_on("#dl-folded")
    b.click_on("#dl-pprof")
    deadline = time.monotonic() + 30
    while not ((downloads / "profile.folded").exists() and (downloads / "profile.pb").exists()):
        assert time.monotonic() < deadline, list(downloads.iterdir())
        time.sleep(0.2)
    time.sleep(0.5)
    folded = (downloads / "profile.folded").read_text()
    assert re.search(r"^ui-other;.*top_outer;top_spin \d+$", folded, re.M) and "phase_" not in folded
    top = subprocess.run([go, "tool", "pprof", "-top", "-nodecount=5", str(downloads / "profile.pb")],
                         capture_output=True, text=True, timeout=120)
    assert top.returncode == 0, top.stderr
    assert "top_spin" in top.stdout and "phase_a" not in top.stdout, top.stdout
    assert b.errors == []


def test_file_page_of_a_real_run(binaries, workloads, browser, tmp_path):
    busy = workloads([binaries["other"], "60"])
    out = tmp_path / "run.html"
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(busy.pid), "--timeout", "3", "-o", "flamegraph",
                 "--file", str(out), timeout=180)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert not re.search(r'(src|href)=["\']?(https?:)?//', text) and "@import" not in text
    b = browser
    b.open(out.as_uri())
    f = frames(b)
    assert {"ui-other", "main", "top_outer", "top_spin"} <= set(f)
    rows = {row[0]: row for row in table(b)}
    assert float(rows["top_spin"][2].rstrip("%")) > 80            # self share of the hot leaf
    assert float(rows["top_outer"][4].rstrip("%")) > 80 and rows["top_outer"][1] == "0"
    b.click_on('#table-pane th[data-sort="total"]')
    assert table(b)[0][0] in ("main", "top_outer", "top_spin", "__libc_start_call_main")
    pprof = b.js("hotstackUI.pprofBase64()")
    assert len(pprof) > 100
    assert b.errors == []
