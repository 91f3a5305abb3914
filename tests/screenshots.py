"""Screenshots for the README, taken by the tests that drive the real thing.

A test renders what it saw (a page in headless Chromium, a terminal's ANSI text made into HTML by
rich) to a PNG in its tmp dir and checks it; with HOTSTACK_UPDATE_SCREENSHOTS=1 the PNG is also
copied to docs/images/, where the README links it."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

from .peers import require_file

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--force-device-scale-factor=1"]


def chromium() -> Path:
    return require_file(Path(shutil.which("chromium") or "/usr/bin/chromium"), "Debian's chromium")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def screenshot(url: str, out: Path, width: int, height: int, profile_dir: Path, budget_ms: int = 0) -> Path:
    """`url` rendered by headless Chromium at width x height into the PNG `out`."""
    flags = [f"--window-size={width},{height}", f"--user-data-dir={profile_dir}", f"--screenshot={out}"]
    if budget_ms:
        flags.append(f"--virtual-time-budget={budget_ms}")
    r = subprocess.run([str(chromium()), *CHROMIUM_FLAGS, *flags, url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and out.exists(), r.stderr[-2000:]
    assert png_size(out) == (width, height)
    return out


def terminal_png(ansi: str, out: Path, columns: int, profile_dir: Path) -> Path:
    """A terminal's text with its colours (tmux capture-pane -e) as a PNG, through rich's HTML export."""
    from rich.console import Console
    from rich.text import Text

    from rich.terminal_theme import MONOKAI

    console = Console(record=True, width=columns + 20, force_terminal=True, color_system="truecolor", file=open(os.devnull, "w"))
    lines = ansi.rstrip("\n").split("\n")
    for line in lines:
        console.print(Text.from_ansi(line), soft_wrap=True)
    page = console.export_html(theme=MONOKAI, inline_styles=True, code_format=_TERMINAL_PAGE)
    html = out.with_suffix(".html")
    html.write_text(page)
    # 8.4 px per column and 17 px per line at 14 px monospace, plus the page's padding.
    return screenshot(html.as_uri(), out, int(columns * 8.45) + 40, len(lines) * 17 + 40, profile_dir)


def publish(png: Path, name: str) -> None:
    if os.environ.get("HOTSTACK_UPDATE_SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, IMAGES / name)


_TERMINAL_PAGE = """<!DOCTYPE html>
<html><head><meta charset="UTF-8"><style>
body {{ margin: 0; padding: 20px; background: {background}; color: {foreground}; }}
pre {{ margin: 0; font: 14px/17px "DejaVu Sans Mono", monospace; }}
</style></head><body><pre><code>{code}</code></pre></body></html>
"""
