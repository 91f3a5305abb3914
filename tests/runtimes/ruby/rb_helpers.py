"""Helpers of the Ruby-frame tests: the workload process and the optional rbspy peer."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import ReadyProcess

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.rb"


def rbspy() -> str | None:
    """rbspy built by .ci/install.d/interpreters.sh (cargo, cached under $HOTSTACK_CACHE), if there."""
    path = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci")) / "rbspy" / "bin" / "rbspy"
    return str(path) if path.exists() else None


class RubyTarget(ReadyProcess):
    """A Ruby program started by a test; it prints one line of JSON when ready."""

    def __init__(self, ruby: str, script: Path, *args: str, flags: tuple[str, ...] = ()) -> None:
        super().__init__([ruby, *flags, str(script), *args])
