"""`--no-perl` and pyroscope.ebpf's `perl_enabled = false` turn the Perl frame source off (and only it)."""

from __future__ import annotations

import argparse

from hotstack.alloy.components import ebpf_args
from hotstack.gadget.cli import add_arguments
from hotstack.gadget.run import RunOptions


def _gadget(*flags: str):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return RunOptions.from_args(p.parse_args(["profile_cpu", *flags])).engine_config()


def test_gadget_flag():
    assert "perl" in _gadget("--no-perl").runtimes_off
    assert _gadget("--no-perl").runtime_frames          # the other runtimes stay on
    assert "perl" not in _gadget().runtimes_off and "perl" not in _gadget("--perl").runtimes_off


def test_alloy_argument():
    a = ebpf_args.SCHEMA.defaults()
    assert a["perl_enabled"] is True and "perl" not in ebpf_args.engine_config(a).runtimes_off
    a["perl_enabled"] = False
    config = ebpf_args.engine_config(a)
    assert config.runtimes_off == ("perl",) and config.runtime_frames
    assert "perl_enabled" not in ebpf_args.NO_UNWINDER
