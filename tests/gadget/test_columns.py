"""The columns table keeps every column readable whatever a frame name's length."""

from __future__ import annotations

import io

from hotstack.gadget.output import render_columns
from hotstack.profile.model import Frame, Profile, Sample


def test_a_frame_name_longer_than_the_line_is_cut_not_the_other_columns():
    long = "some::very::long::templated<name>" * 20
    p = Profile([Sample((Frame(long), Frame("main")), 5, 123, 123, "long_comm_here"),
                 Sample((Frame("a"),), 3, 7, 7, "c2")], 0, 10**9, 49)
    out = io.StringIO()
    render_columns(p, out)            # not a terminal: 160 columns
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 160 for line in lines), max(map(len, lines))
    header = next(line for line in lines if "STACK" in line)
    for name in ("COMM", "PID", "TID", "SAMPLES", "%"):
        assert name in header, header
    row = next(line for line in lines if "long_comm_here" in line)
    assert "123" in row and " 5 " in row and "62.5" in row and row.rstrip(" │").endswith("…"), row
