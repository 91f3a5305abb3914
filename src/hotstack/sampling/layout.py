"""Byte layouts shared with bpf/profile.bpf.c. Keep the two in step."""

from __future__ import annotations

import struct

SAMPLE_KEY = struct.Struct("<IIii")        # pid, tid, user_stack_id, kern_stack_id
SAMPLE_VALUE = struct.Struct("<Q16s")      # count, comm
STACK_DEPTH = 127

# enum stat_index
STAT_SAMPLES, STAT_IDLE, STAT_FILTERED, STAT_COUNTS_FULL = 0, 1, 2, 3
STAT_USTACK_COLLISION, STAT_KSTACK_COLLISION, STAT_USTACK_ERROR, STAT_KSTACK_ERROR = 4, 5, 6, 7
STAT_MAX = 8

EEXIST = 17


def parse_stack(raw: bytes) -> tuple[int, ...]:
    """A stack-map value: up to STACK_DEPTH u64 addresses, zero-terminated."""
    addrs = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
    try:
        return addrs[:addrs.index(0)]
    except ValueError:
        return addrs
