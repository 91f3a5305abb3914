"""Renderers of profile_cpu results: columns (a rich table), json, folded."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import TextIO

from ..profile.folded import render_folded
from ..profile.model import Profile
from .datasource import DataSource, Row

MAX_STACK_LINES = 16


def render_json(ds: DataSource, rows: list[Row], out: TextIO) -> None:
    """One JSON object per row, fields nested by their dotted names (as `ig -o json`)."""
    for row in rows:
        obj: dict = {}
        for f in ds.fields:
            if f.annotations.get("json.skip") == "true" or f.name not in row:
                continue
            node = obj
            *parents, leaf = f.name.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = row[f.name]
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def render_folded_output(profile: Profile, out: TextIO) -> None:
    out.write(render_folded(profile))


def render_columns(profile: Profile, out: TextIO, max_rows: int = 20, title: str = "") -> None:
    """The hottest stacks: COMM, PID, TID (or thread count), SAMPLES, %, STACK (leaf first)."""
    from rich.console import Console
    from rich.table import Table

    groups: dict[tuple, dict] = defaultdict(lambda: {"value": 0, "tids": set()})
    for s in profile.samples:
        # Group by what the reader sees (frame names), not by exact addresses.
        g = groups[(s.comm, s.pid, tuple((f.name, f.is_kernel) for f in s.stack))]
        g["value"] += s.value
        g["tids"].add(s.tid)
    total = profile.total
    rows = sorted(groups.items(), key=lambda kv: -kv[1]["value"])
    console = Console(file=out, width=None if out.isatty() else 160, force_terminal=False,
                      no_color=not out.isatty(), highlight=False)
    table = Table(title=title or None, show_lines=True, expand=False)
    for name, justify in (("COMM", "left"), ("PID", "right"), ("TID", "right"), ("SAMPLES", "right"),
                          ("%", "right"), ("STACK (leaf first)", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for (comm, pid, stack), g in rows[:max_rows]:
        tids = g["tids"]
        tid = str(next(iter(tids))) if len(tids) == 1 else f"{len(tids)} threads"
        names = [name + (" [k]" if is_kernel else "") for name, is_kernel in stack] or ["[no stack]"]
        if len(names) > MAX_STACK_LINES:
            names = names[:MAX_STACK_LINES - 1] + [f"… {len(names) - MAX_STACK_LINES + 1} more"]
        table.add_row(comm, str(pid), tid, str(g["value"]), f"{100.0 * g['value'] / total:.1f}" if total else "0",
                      "\n".join(names))
    console.print(table)
    console.print(footer(profile, shown=min(len(rows), max_rows), distinct=len(rows)))


def footer(profile: Profile, shown: int, distinct: int) -> str:
    st = profile.stats
    parts = [f"{profile.total} samples in {profile.duration_ns / 1e9:.1f}s at {profile.frequency_hz} Hz",
             f"{distinct} distinct stacks ({shown} shown)"]
    if st.idle:
        parts.append(f"{st.idle} idle samples skipped")
    if st.filtered:
        parts.append(f"{st.filtered} filtered")
    lost = []
    if st.user_stacks_lost:
        lost.append(f"{st.user_stacks_lost} user stacks")
    if st.kernel_stacks_lost:
        lost.append(f"{st.kernel_stacks_lost} kernel stacks")
    if lost:
        parts.append("lost: " + ", ".join(lost) + f" ({st.stack_collisions} by stack-map collisions)")
    if st.truncated:
        parts.append(f"{st.truncated} samples with a runtime stack cut short ([truncated])")
    if st.counts_full:
        parts.append(f"{st.counts_full} samples dropped: aggregation map full")
    return "; ".join(parts)


def stdout() -> TextIO:
    return sys.stdout
