"""A reader that closes the pipe early (`hotstack top | head -c 10`): what was written before
reaches it, and the command ends quietly with exit 0, as other unix tools do, not with exit 1
and no word (rich's own answer to a broken pipe)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.root

FIRST = 10


@pytest.mark.parametrize("args, starts", [
    # no --timeout: top ends only because its reader went away
    (("top", "--interval", "0.5"), b"hotstack t"),
    (("run", "profile_cpu", "--host", "--timeout", "2", "--map-fetch-interval", "0"), None),
    (("doctor",), None),
])
def test_a_reader_that_leaves_early_ends_the_command_quietly(args, starts):
    p = subprocess.Popen([sys.executable, "-m", "hotstack", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        head = p.stdout.read(FIRST)          # as `head -c 10`: read a little, then close
        p.stdout.close()
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert len(head) == FIRST, (head, err[-2000:])
    if starts is not None:
        assert head == starts
    assert p.returncode == 0, err[-3000:]
    assert b"Traceback" not in err and b"Broken pipe" not in err, err[-3000:]
