"""The lines of a PHP function in a test's own script, to check the lines that samples carry."""

from __future__ import annotations

from pathlib import Path


def function_lines(path: Path, name: str) -> range:
    """From the line of `function name(` to the brace that closes it: the brace at the function's
    own indentation (a loop's or an if's closes deeper)."""
    source = path.read_text().splitlines()
    start = next(i for i, line in enumerate(source, 1) if f"function {name}(" in line)
    head = source[start - 1]
    closing = head[:len(head) - len(head.lstrip())] + "}"
    end = next(i for i in range(start, len(source) + 1) if source[i - 1] == closing)
    return range(start, end + 1)
