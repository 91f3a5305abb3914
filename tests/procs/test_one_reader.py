"""procs/ is hotstack's one reader of /proc (ARCHITECTURE.md): no other module of src/ names a /proc
path. A path is a string (or an f-string) that starts with /proc; docstrings and comments, which
speak of /proc, are not paths."""

from __future__ import annotations

import ast
from pathlib import Path

import hotstack

SRC = Path(hotstack.__file__).resolve().parent
PROCS = SRC / "procs"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (a string statement)."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def proc_paths(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string of a module that starts with /proc."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        else:
            continue
        if text == "/proc" or text.startswith("/proc/"):
            found.append((node.lineno, text))
    return found


def test_proc_paths_are_named_in_procs_only():
    outside = {f"{path.relative_to(SRC)}:{line}": text for path in sorted(SRC.rglob("*.py"))
               if PROCS not in path.parents for line, text in proc_paths(path)}
    assert outside == {}, outside


def test_the_scan_finds_what_procs_names():
    """(It can fail: procs/ itself names them.)"""
    found = [text for path in PROCS.glob("*.py") for _line, text in proc_paths(path)]
    assert "/proc/self/status" in found and any(text.startswith("/proc/self/fd/") for text in found), found
