"""Durations in Go's notation (`1m30s`, `500ms`, `15s`), as Alloy and Inspektor Gadget write them:
the one parser, for Alloy arguments and command-line flags alike."""

from __future__ import annotations

import re

from .errors import ConfigError

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
EXAMPLES = "500ms, 15s, 1m30s"


def go_duration(text: str) -> float:
    """Seconds in a Go duration string (time.ParseDuration's rules: an optional sign, units on
    every number, "0" alone without one). ValueError otherwise."""
    if text == "0":
        return 0.0
    body = text[1:] if text[:1] in "+-" else text
    pos, total = 0, 0.0
    for m in _PART.finditer(body):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(body) or not body:
        raise ValueError(f"invalid duration {text!r}")
    return -total if text.startswith("-") else total


def parse_duration(text: str, what: str = "duration") -> float:
    """A flag's duration in seconds: Go's notation, or a bare number of seconds."""
    text = str(text).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return go_duration(text)
    except ValueError:
        raise ConfigError(f"{what} {text!r}: not a duration (examples: {EXAMPLES})") from None
