"""The one flame tree, and Profile -> one self-contained HTML page (works offline: no external
script, font or style).

What `-o flamegraph` writes is the profile viewer (profile/ui.py) over one profile: flame graph and
table of functions side by side and linked (click a frame to zoom and find it in the table, click
a function to mark its frames), search with highlight, label filters (comm, pid, container ...),
downloads as pprof or folded. Frames are DOM elements, so the page can be searched and tested as
text. Roots are the command names, then user frames from the outermost in, then kernel frames.
A run that collects every interval (--map-fetch-interval) still writes one merged profile, so the
file's timeline is one span; the agent's page has one slice per push.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import Profile, amount_text
from .ui import render_page, slices_from_profile

# A node: [name, value, kind, children]; kind 0 = user, 1 = kernel, 2 = comm (root level).
_USER, _KERNEL, _COMM = 0, 1, 2
Path = list[tuple[str, int]]     # (name, kind) from the root down


def build_tree(paths: Iterable[tuple[Path, int]]) -> list:
    """The one flame tree: (path root first, value) pairs -> [name, value, kind, children] nodes,
    children widest first (then by name)."""
    root: list = ["all", 0, _COMM, {}]
    for path, value in paths:
        root[1] += value
        node = root
        for name, kind in path:
            children = node[3]
            child = children.get((name, kind))
            if child is None:
                child = children[(name, kind)] = [name, 0, kind, {}]
            child[1] += value
            node = child
    return _freeze(root)


def as_dict(node: list) -> dict:
    """A tree node as {n: name, v: value, c: [children]} (the agent's /flamegraph?format=json)."""
    return {"n": node[0], "v": node[1], "c": [as_dict(c) for c in node[3]]}


def _freeze(node: list) -> list:
    children = sorted(node[3].values(), key=lambda c: (-c[1], c[0]))
    return [node[0], node[1], node[2], [_freeze(c) for c in children]]


def render_flamegraph(profile: Profile, title: str = "hotstack CPU flame graph") -> str:
    amount = amount_text(profile.total, profile.sample_type)
    subtitle = (f"{amount} at {profile.frequency_hz} Hz over {profile.duration_ns / 1e9:.1f} s"
                if profile.frequency_hz else f"{amount} over {profile.duration_ns / 1e9:.1f} s")
    return render_page(slices_from_profile(profile), title=title, subtitle=subtitle, series="comm",
                       frequency_hz=profile.frequency_hz)
