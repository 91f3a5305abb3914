from __future__ import annotations

from pathlib import Path

from ..conftest import built_workload

HERE = Path(__file__).resolve().parent
hot_ab = built_workload(HERE, "hot_ab")         # the 75/25 workload
hot_ab_stripped = built_workload(HERE, "hot_ab", "-s", binary="hot_ab_stripped")
