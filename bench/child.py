"""A measurement run in a fresh interpreter with a given tree's `src/` first on sys.path (the bench
scripts that compare checkouts): the child prints one JSON line last, which is returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_json_child(code: str, args: list[str], src: str | Path, cwd: str | Path, who: str) -> dict:
    """Runs `python -c code *args` with PYTHONPATH=src in `cwd`; its last stdout line, parsed. A
    failed run ends the bench with its last line of stderr, naming `who` and the tree."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(src)), cwd=cwd)
    if out.returncode != 0:
        raise SystemExit(f"{who}: the run with {src} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
