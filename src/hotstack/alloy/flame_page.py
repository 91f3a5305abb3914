"""The agent's profile page: the viewer (profile/ui.py) over the local store's recent slices, with a
form to choose the service and the span; and the flame tree of the same slices as JSON."""

from __future__ import annotations

import html

from ..profile.flamegraph import as_dict, build_tree
from ..profile.ui import Slice, render_page


def tree(slices: list[Slice]) -> dict:
    """The slices' stacks (without the service's root frame) as a nested {n, v, c} tree (the one flame tree)."""
    return as_dict(build_tree((list(stack[1:]), value) for sl in slices for stack, value in sl.samples))


def page(title: str, slices: list[Slice], services: list[str], current: str, minutes: float) -> str:
    options = "".join(f'<option value="{html.escape(s)}"{" selected" if s == current else ""}>'
                      f'{html.escape(s or "all services")}</option>' for s in [""] + services)
    nav = (f'<form method="get" action="/flamegraph">service_name <select name="service_name">{options}</select> '
           f'last <input name="minutes" size="4" value="{minutes:g}"> min <button>show</button></form>'
           f'<a href="/">components</a>')
    total = sum(v for sl in slices for _, v in sl.samples)
    return render_page(slices, title=title, subtitle=f"{total} samples", series="service_name", nav=nav)
