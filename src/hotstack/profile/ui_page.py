"""The viewer page's template: HTML, CSS and JavaScript in one file, ui_page.html (package data);
ui.py fills in the data.

Frames are DOM elements (class "frame", data-name, data-samples, aria-label), so the page can be
searched as text and checked by tests. window.hotstackUI is the page's API (used by its own
controls and by tests); window.hotstackFlamegraph is a second name for its zoom and search, for
scripts written against it; the URL fragment takes #zoom=NAME&search=TEXT.
"""

from __future__ import annotations

import functools
from importlib.resources import files


@functools.cache
def page_template() -> str:
    """The page with its placeholders (__TITLE__, __SUBTITLE__, __NAV__, __CONFIG__, __DATA__)."""
    return files(__package__).joinpath("ui_page.html").read_text(encoding="utf-8")
