"""The front door sets the collector's thresholds before any work (hotstack/gc_policy.py)."""

from __future__ import annotations

import gc

import pytest

from hotstack import cli, gc_policy


def test_the_front_door_sets_the_profilers_gc_thresholds():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with pytest.raises(SystemExit):
            cli.main(["--version"])
        assert gc.get_threshold() == gc_policy.THRESHOLDS
        # young collections still run: cycles made by the profiler are not kept for good
        assert gc_policy.THRESHOLDS[0] > 0
    finally:
        gc.set_threshold(*before)
