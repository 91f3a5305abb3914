"""The adversarial suite: what a hostile user or a broken network does to both front doors.

Every case holds hotstack to its rule for bad input: one line on stderr, exit code 2, never a
traceback, never a claim that did not happen. Property-based cases (hypothesis) keep looking
for the next input that breaks the rule; their examples are bounded so the suite stays quick.
"""

from __future__ import annotations


def assert_one_line(r, *fragments: str) -> str:
    """Exit 2 with exactly one line on stderr that holds every fragment."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
