"""What `hotstack top` draws: a header, the function table, the keys. Rich renderables only; the
terminal (alternate screen, keys) is app.py's."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..profile.functions import FunctionCounts
from ..text import escape

SORTS = ("self", "total", "name")
KEYS_HELP = "q quit  s sort by self  t by total  n by name  / filter  Esc clear filter  p pause"
CHROME_LINES = 5   # header, status, blank, table heading, keys


@dataclass
class ViewState:
    """What the keys change."""

    sort: str = "self"
    filter: str = ""
    editing: bool = False     # typing a filter after '/'
    paused: bool = False


def render(counts: FunctionCounts, state: ViewState, *, scope: str, frequency_hz: int, covered_s: float,
           window_s: float, height: int, notes: str = "") -> Group:
    rows = counts.top(state.sort, state.filter, limit=max(1, height - CHROME_LINES))
    total = counts.samples
    window = f"last {window_s:g} s" if window_s > 0 else "since start"
    header = Text.assemble(("hotstack top", "bold"), f"  {escape(scope)}  {frequency_hz} Hz  {window}")
    status = f"{total} samples in {covered_s:.1f} s  sort: {state.sort}"
    if state.filter or state.editing:
        status += f"  filter: {escape(state.filter)}" + ("_" if state.editing else "")
    if state.paused:
        status += "  [paused]"
    if notes:
        status += f"  ({notes})"

    table = Table(box=None, pad_edge=False, expand=True, show_edge=False, header_style="bold white on blue")
    table.add_column("%SELF", justify="right", width=6, no_wrap=True)
    table.add_column("%TOTAL", justify="right", width=6, no_wrap=True)
    table.add_column("SELF", justify="right", width=7, no_wrap=True)
    table.add_column("TOTAL", justify="right", width=7, no_wrap=True)
    table.add_column("FUNCTION", ratio=3, no_wrap=True, overflow="ellipsis")
    table.add_column("MODULE", ratio=1, no_wrap=True, overflow="ellipsis")
    for row in rows:
        key = row.key
        name = Text(escape(key.name), style="cyan" if key.kernel else "")
        table.add_row(_pct(row.self_samples, total), _pct(row.total_samples, total), str(row.self_samples),
                      str(row.total_samples), name, Text(escape(key.module)))
    if not rows:
        table.add_row("", "", "", "", Text("no samples yet" if not total else "nothing matches the filter",
                                           style="dim"), "")
    return Group(header, Text(status), Text(""), table, Text(KEYS_HELP, style="dim"))


def _pct(part: int, total: int) -> str:
    return f"{100.0 * part / total:.1f}" if total else "0.0"
