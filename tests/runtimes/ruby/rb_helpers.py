"""Helpers of the Ruby-frame tests: the workload process and the optional rbspy peer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.rb"


def rbspy() -> str | None:
    """rbspy built by .ci/install.d/interpreters.sh (cargo, cached under $HOTSTACK_CACHE), if there."""
    path = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci")) / "rbspy" / "bin" / "rbspy"
    return str(path) if path.exists() else None


class RubyTarget:
    """A Ruby program started by a test; it prints one line of JSON when ready."""

    def __init__(self, ruby: str, script: Path, *args: str, flags: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen([ruby, *flags, str(script), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"ruby target did not start: {self.proc.stderr.read()[-2000:]}")
        self.info = json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
