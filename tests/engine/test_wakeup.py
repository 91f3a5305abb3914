"""sampling/wakeup.py: the flag the engine's threads wait on."""

from __future__ import annotations

import threading
import time

from hotstack.sampling.wakeup import Wakeup


def test_a_wait_times_out_unless_set_and_clears_what_it_returns():
    w = Wakeup()
    try:
        began = time.monotonic()
        assert w.wait(0.05) is False
        assert time.monotonic() - began >= 0.045
        w.set()
        w.set()               # (twice: still one wake-up)
        assert w.wait(1) is True
        assert w.wait(0) is False
        w.set()
        w.clear()
        assert w.wait(0) is False
    finally:
        w.close()


def test_a_set_from_another_thread_wakes_the_waiter_at_once():
    w = Wakeup()
    try:
        timer = threading.Timer(0.05, w.set)
        began = time.monotonic()
        timer.start()
        assert w.wait(5) is True
        assert time.monotonic() - began < 2
    finally:
        w.close()
    w.set()          # closed: a no-op, never a write to a descriptor number reused since
    w.close()
