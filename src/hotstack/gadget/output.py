"""Renderers of profile_cpu results: columns (a rich table), json, folded."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TextIO

from ..errors import ConfigError
from ..profile.folded import render_folded
from ..profile.model import Frame, Profile, amount_text
from ..profile.transforms import fold_own
from ..profile.trim import trim_stack
from ..text import console as text_console, escape
from .datasource import DataSource, rows

MAX_STACK_LINES = 8   # lines per stack in the table, the cut's marker included


@dataclass(frozen=True)
class RowShape:
    """How -o json/jsonpretty/yaml print rows: which fields (None: all but json.skip), in what order."""
    fields: list[str] | None = None
    sort: list[tuple[str, bool]] = field(default_factory=list)
    mode: str = "json"


def render_rows(profile: Profile, ds: DataSource, out: TextIO, shape: RowShape = RowShape()) -> None:
    """The rows of one fetch, fields nested by their dotted names (as `ig -o json`): json is one
    object per line, jsonpretty one indented array, yaml one document (a list) per fetch."""
    from .filters import sort_rows

    names = shape.fields if shape.fields is not None else [
        f.name for f in ds.fields if f.annotations.get("json.skip") != "true"]
    objects = []
    for row in sort_rows(rows(ds, profile), shape.sort):
        obj: dict = {}
        for name in names:
            if name not in row:
                continue
            node = obj
            *parents, leaf = name.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = row[name]
        objects.append(obj)
    if shape.mode == "jsonpretty":
        out.write(json.dumps(objects, indent=2) + "\n")
    elif shape.mode == "yaml":
        import yaml
        out.write("---\n" + yaml.safe_dump(objects, sort_keys=False, default_flow_style=False))
    else:
        for obj in objects:
            out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def render_folded_output(profile: Profile, out: TextIO) -> None:
    out.write(render_folded(profile))


# Room the other columns (COMM up to 15, PID, TID or "N threads", SAMPLES, %) and the borders take.
STACK_ROOM = 64


def render_columns(profile: Profile, out: TextIO, max_rows: int = 20, title: str = "",
                   own_pids: Collection[int] = ()) -> None:
    """The hottest stacks: COMM, PID, TID (or thread count), SAMPLES, %, STACK (leaf first).

    Made to fit a terminal: each stack trimmed to the frames that matter (profile/trim.py; -o
    folded and json keep them all), one line per frame cut at the terminal's width. Samples of
    `own_pids` (hotstack itself, in whole-host views) are one row (profile/transforms.fold_own)."""
    from rich.table import Table
    from rich.text import Text

    samples = fold_own(profile, own_pids).samples
    groups: dict[tuple, dict] = defaultdict(lambda: {"value": 0, "tids": set()})
    for s in samples:
        # Group by what the reader sees (frame names), not by exact addresses.
        g = groups[(s.comm, s.pid, tuple(Frame(f.name, f.kind) for f in s.stack))]
        g["value"] += s.value
        g["tids"].add(s.tid)
    total = profile.total
    rows = sorted(groups.items(), key=lambda kv: -kv[1]["value"])
    console = text_console(out, width=None if out.isatty() else 160, force_terminal=False,
                      no_color=not out.isatty(), highlight=False)
    table = Table(title=title or None, show_lines=True, expand=False)
    for name, justify in (("COMM", "left"), ("PID", "right"), ("TID", "right"), ("SAMPLES", "right"),
                          ("%", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    # A frame name longer than the line (no_wrap) would squeeze the other columns to nothing
    # instead of being cut itself: the stack column gets what they leave at most.
    table.add_column("STACK (leaf first)", justify="left", overflow="ellipsis", no_wrap=True,
                     max_width=max(20, console.width - STACK_ROOM))
    trimmed = False
    for (comm, pid, stack), g in rows[:max_rows]:
        tids = g["tids"]
        tid = str(next(iter(tids))) if len(tids) == 1 else f"{len(tids)} threads"
        shown, left_out = trim_stack(stack, MAX_STACK_LINES)
        trimmed |= left_out > 0
        names = [f"… {left_out} more" if f is None else escape(f.name) + (" [k]" if f.is_kernel else "")
                 for f in shown] or ["[no stack]"]
        # Text, not str: rich would read "[...]" in a name as markup.
        table.add_row(Text(escape(comm)), str(pid), tid, str(g["value"]),
                      f"{100.0 * g['value'] / total:.1f}" if total else "0", Text("\n".join(names)))
    console.print(table)
    notes = []
    if own_pids and any(s.pid in own_pids for s in profile.samples):
        notes.append("hotstack's own samples in one row (--show-hotstack for its stacks)")
    if trimmed:
        notes.append("stacks trimmed to the frames that matter (-o folded or json for every frame)")
    # One line, however long: scripts read the footer as the last line.
    console.print(footer(profile, shown=min(len(rows), max_rows), distinct=len(rows), notes=notes), soft_wrap=True,
                  markup=False)


def footer(profile: Profile, shown: int, distinct: int, notes: Collection[str] = ()) -> str:
    st = profile.stats
    rate = f" at {profile.frequency_hz} Hz" if profile.frequency_hz else ""
    parts = [f"{amount_text(profile.total, profile.sample_type)} in {profile.duration_ns / 1e9:.1f}s{rate}",
             f"{distinct} distinct stacks ({shown} shown)"]
    if st.idle:
        parts.append(f"{st.idle} idle samples skipped")
    if st.filtered:
        parts.append(f"{st.filtered} filtered")
    if st.out_of_scope:
        parts.append(f"{amount_text(st.out_of_scope, profile.sample_type)} "
                     f"of processes outside containers left out (--host for them)")
    lost = []
    if st.user_stacks_lost:
        lost.append(f"{st.user_stacks_lost} user stacks")
    if st.kernel_stacks_lost:
        lost.append(f"{st.kernel_stacks_lost} kernel stacks")
    if lost:
        parts.append("lost: " + ", ".join(lost) + f" ({st.stack_collisions} by stack-map collisions)")
    if st.truncated:
        parts.append(f"{st.truncated} samples with a stack cut short ([truncated])")
    if st.runtimes_unread:
        parts.append(f"{st.runtimes_unread} processes of a runtime not read, without their runtime frames "
                     f"(see the warnings; hotstack doctor --pid PID)")
    if st.runtimes_partly_read:
        parts.append(f"{st.runtimes_partly_read} processes of a runtime read in part, some frames without their "
                     f"line (see the warnings; hotstack doctor --pid PID)")
    if st.engine_failures:
        parts.append(f"{st.engine_failures} failures inside the engine, each logged and gone on from (see the log)")
    if st.files_not_held:
        parts.append(f"{st.files_not_held} files of containers' processes not held open (past the bound of "
                     f"held files): their frames are named only while the process runs")
    if st.counts_full:
        parts.append(f"{st.counts_full} samples dropped: aggregation map full")
    if st.native_incomplete or st.native_no_table:
        parts.append(f"kernel unwinder: {st.native_incomplete} stacks short of the root, {st.native_no_table} PCs "
                     f"in files not yet loaded, {st.native_fp_frames} frames by frame pointers")
    parts.extend(notes)
    return "; ".join(parts)


STDOUT_MODES = ("columns", "json", "jsonpretty", "yaml", "folded")   # folded: unless --file


def stdout(mode: str, file: str) -> TextIO | None:
    """Where -o `mode` prints (None: it writes a file or nothing). A stdout that was closed when
    hotstack started (`>&-`, sys.stdout None) is refused at once."""
    if mode not in STDOUT_MODES or file:
        return None
    if sys.stdout is None:
        raise ConfigError(f"-o {mode} prints to stdout, which is closed (give it a file or a pipe, or use -o none)")
    return sys.stdout
