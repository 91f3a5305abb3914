"""Trace/span correlation with OpenTelemetry eBPF Instrumentation (OBI) and Beyla.

OBI pins `traces_ctx_v1` at `<bpf_fs_root>/otel/traces_ctx_v1`: per thread (key
`(tgid << 32) | tid`), the trace id (16 bytes) and span id (8 bytes) it serves. Our
BPF programs (bpf/obi.h) look the sampled thread up at sample time when the loader
gives them that map; samples then carry `trace_id`/`span_id` labels (hex), as
pyroscope.ebpf's pprof sample labels do. When the pin is absent or not of that
layout, correlation is off with one info line, never an error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from .. import ebpf
from ..bpf import schema
from ..ebpf.pinning import open_pinned_map

log = logging.getLogger("hotstack.obi")

MAP_NAME = "traces_ctx_v1"
PIN_DIR = "otel"
KEY_SIZE, VALUE_SIZE = 8, schema.TRACE_CONTEXT.size   # pid_tgid -> struct trace_context
TRACE_ID_BYTES, SPAN_ID_BYTES = 16, 8
DEFAULT_BPF_FS_ROOT = "/sys/fs/bpf/"


@dataclass(frozen=True)
class ObiConfig:
    """pyroscope.ebpf's `obi_process_context_enabled` (default true) and `bpf_fs_root`."""

    enabled: bool = True
    bpf_fs_root: str = DEFAULT_BPF_FS_ROOT


def pin_path(bpf_fs_root: str) -> str:
    return os.path.join(bpf_fs_root or DEFAULT_BPF_FS_ROOT, PIN_DIR, MAP_NAME)


def open_trace_context_map(bpf_fs_root: str) -> ebpf.Map | None:
    """OBI's pinned map, or None (with one info line saying why correlation is off)."""
    path = pin_path(bpf_fs_root)
    try:
        m = open_pinned_map(path)
    except ebpf.EbpfError as e:
        log.info("trace/span correlation off: no OBI map at %s (%s)", path, str(e).rsplit(": ", 1)[-1])
        return None
    if (m.key_size, m.value_size) != (KEY_SIZE, VALUE_SIZE):
        log.info("trace/span correlation off: %s has %d-byte keys and %d-byte values, OBI's have %d and %d",
                 path, m.key_size, m.value_size, KEY_SIZE, VALUE_SIZE)
        m.close()
        return None
    log.info("trace/span correlation on: samples are looked up in %s", path)
    return m


def attach_trace_context(spec: ebpf.CollectionSpec, config: ObiConfig | None) -> dict[str, ebpf.Map]:
    """Prepare a spec that includes bpf/obi.h: returns the `existing` maps for Collection.load.

    With OBI's map found, the programs read it at sample time; otherwise the placeholder
    map is shrunk to one entry and the lookup is compiled out by the `obi_enabled` constant.
    """
    found = open_trace_context_map(config.bpf_fs_root) if config is not None and config.enabled else None
    if found is None:
        spec.maps[MAP_NAME].max_entries = 1
        return {}
    spec.set_constant("obi_enabled", 1)
    return {MAP_NAME: found}


_NO_TRACE, _NO_SPAN = bytes(16), bytes(8)


def trace_labels(trace_id: bytes, span_id: bytes) -> tuple[tuple[str, str], ...]:
    """Sample labels for a trace context; none when the thread had no span (all zero)."""
    # (two comparisons of bytes first: any() over them makes an int of each byte)
    if trace_id == _NO_TRACE and span_id == _NO_SPAN:
        return ()
    if not any(trace_id) and not any(span_id):     # (zero, of another length)
        return ()
    return (("trace_id", trace_id.hex()), ("span_id", span_id.hex()))
