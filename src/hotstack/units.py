"""Durations in Go's notation (`1m30s`, `500ms`, `15s`) as Alloy and Inspektor Gadget write them."""

from __future__ import annotations

import re

from .errors import ConfigError

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds in a duration string; a bare number is seconds."""
    text = str(text).strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for m in _PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ConfigError(f"{what} {text!r}: not a duration (examples: 500ms, 15s, 1m30s)")
    return total
