"""The real runtimes come from tests/runtime_fixtures.py; the agent and Pyroscope peers of
tests/alloy serve the end-to-end tests against a real engine."""

import json

from ..alloy.conftest import agent, pyroscope  # noqa: F401


def json_rows(stdout: str) -> list[dict]:
    """The rows of `hotstack run ... -o json`: one JSON object (or array of them) per line."""
    rows = []
    for line in filter(str.strip, stdout.splitlines()):
        value = json.loads(line)
        rows.extend(value if isinstance(value, list) else [value])
    return rows
