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


def _vlq(value: int, signed: bool = True) -> bytes:
    """V8's VLQ (base/vlq.h): zig-zag where signed, then 7 bits a byte, low first, 0x80 while more."""
    if signed:
        value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


def _position(offset: int, inlined: int = 0) -> int:
    """A SourcePosition word: script offset + 1 in bits 1-30, the inlining id from bit 31."""
    return ((offset + 1) << 1) | (inlined << 31)


def _table(entries) -> bytes:
    """A source position table of (code offset, position, is statement), as V8 encodes one."""
    raw, code, position = b"", -1, 0
    for offset, pos, statement in entries:
        delta = offset - code
        raw += _vlq(delta if statement else -delta - 1) + _vlq(pos - position)
        code, position = offset, pos
    return raw


def test_source_position_tables():
    from hotstack.runtimes.v8.positions import decode_table, position_at, script_offset
    entries = [(0, _position(10), True), (7, _position(300), False), (200, _position(42, inlined=1), True),
               (230, _position(310), True)]
    table = decode_table(_table(entries))
    assert table == ([0, 7, 200, 230], [p for _o, p, _s in entries])
    # the last entry at or before an offset; in an inlined function's code, its caller's last position
    assert [position_at(table, o) for o in (0, 6, 7, 199, 205, 231)] == [10, 10, 300, 300, 300, 310]
    assert position_at(table, -1) == -1 and position_at(decode_table(b""), 5) == -1
    assert script_offset(0) == -1 and script_offset(_position(5) | 1) == -1     # none; external
    # a table cut short keeps its whole entries
    assert decode_table(_table(entries)[:-1])[0] == [0, 7, 200]


def test_baseline_code_offsets_to_bytecodes():
    from hotstack.runtimes.v8.positions import bytecode_starts, pc_ends
    count = 8
    sizes = bytes([1, 1, 1, 1, 2, 3, 1, 5] + [1, 1, 1, 1, 3, 5, 1, 9] + [1, 1, 1, 1, 5, 9, 1, 17])
    assert len(sizes) == 3 * count
    # opcodes 4 (2 bytes), 5 (3), a Wide prefix (0) before 5 (5 bytes at double scale), 7 (5)
    code = bytes([4, 9, 5, 1, 2, 0, 5, 1, 2, 3, 4, 7, 1, 2, 3, 4])
    assert bytecode_starts(code, sizes) == [0, 2, 5, 11]
    # the prologue's machine code, then each bytecode's
    assert pc_ends(b"".join(_vlq(n, signed=False) for n in (20, 6, 300, 4))) == [20, 26, 326, 330]
