"""CPython frames: detection, per-version offsets, frame chains, code objects and the merge
of Python frames into native stacks."""
