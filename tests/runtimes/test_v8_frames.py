"""JavaScript frames without a process: their names, and their kind in OTLP."""

from __future__ import annotations

from hotstack.profile.model import Frame, FrameKind, Profile, Sample
from hotstack.profile.otlp import encode_profile
from hotstack.runtimes.v8.heap import Script, is_object, is_smi, smi
from hotstack.runtimes.v8.names import js_frame


def test_js_frame_names():
    assert js_frame("hot", "/srv/app.js", 12) == Frame("hot (/srv/app.js:12)", FrameKind.JS, file="/srv/app.js", line=12)
    assert js_frame("", "node:internal/main", 0).name == "(anonymous) (node:internal/main)"
    assert js_frame("f", "", 0).name == "f"


def test_tagged_words():
    assert is_smi(7 << 32) and smi(7 << 32) == 7 and smi((2**32 - 3) << 32) == -3
    assert is_object(0x1234561) and not is_object(0x1234560) and not is_smi(0x1234561)


def test_line_of_position():
    script = Script("a.js", [9, 19, 29])        # newlines at 9, 19, 29
    assert [script.line(p) for p in (0, 9, 10, 25, 40)] == [1, 1, 2, 3, 4]
    assert Script("b.js", []).line(5) == 0


def test_js_frames_in_otlp_are_v8js():
    frame = js_frame("hot", "/srv/app.js", 12)
    raw = encode_profile(Profile([Sample((frame, Frame("main")), 3, 1, 1, "node")], 0, 10**9, 99))
    assert b"v8js" in raw and b"hot (/srv/app.js:12)" in raw
