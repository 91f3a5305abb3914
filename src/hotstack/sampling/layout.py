"""Byte layouts shared with bpf/profile.bpf.c. Keep the two in step.

Sample transport (the comment at the top of profile.bpf.c is the reference):
- frame-pointer samples: counts_<b> maps SAMPLE_KEY -> SAMPLE_VALUE, stacks by id in
  user_stacks_<b> / kern_stacks_<b> (b = the buffer, 0 or 1);
- snapshot samples: one record per sample in the `snapshots` ring buffer:
  SAMPLE_KEY, then SNAPSHOT_TAIL (comm, buffer, stack_len, ip, sp, bp), then the stack bytes.
  A field appended to SAMPLE_KEY (and struct sample_key) moves the tail; offsets below follow.
"""

from __future__ import annotations

import struct

# pid, tid, user_stack_id, kern_stack_id, python_stack, trace (OBI trace id 16 bytes + span id 8, bpf/obi.h)
SAMPLE_KEY = struct.Struct("<IIiiQ24s")
SAMPLE_VALUE = struct.Struct("<Q16s")      # count, comm
STACK_DEPTH = 127

# struct snapshot, after its leading struct sample_key
SNAPSHOT_TAIL = struct.Struct("<16sIIQQQ")  # comm, buffer, stack_len, ip, sp, bp
SNAPSHOT_HEADER_SIZE = SAMPLE_KEY.size + SNAPSHOT_TAIL.size
PAGE_BYTES = 4096
SNAPSHOT_PAGES = 4
SNAPSHOT_STACK_BYTES = (SNAPSHOT_PAGES + 1) * PAGE_BYTES

# snapshot_mode (.rodata)
SNAPSHOT_NONE, SNAPSHOT_LISTED, SNAPSHOT_ALL = 0, 1, 2

# enum stat_index
STAT_SAMPLES, STAT_IDLE, STAT_FILTERED, STAT_COUNTS_FULL = 0, 1, 2, 3
STAT_USTACK_COLLISION, STAT_KSTACK_COLLISION, STAT_USTACK_ERROR, STAT_KSTACK_ERROR = 4, 5, 6, 7
STAT_SNAPSHOTS, STAT_SNAPSHOT_RING_FULL, STAT_SNAPSHOT_NO_REGS = 8, 9, 10
STAT_MAX = 11

EEXIST = 17


def parse_stack(raw: bytes) -> tuple[int, ...]:
    """A stack-map value: up to STACK_DEPTH u64 addresses, zero-terminated."""
    addrs = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
    try:
        return addrs[:addrs.index(0)]
    except ValueError:
        return addrs
