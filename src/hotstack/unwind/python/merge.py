"""Put Python frames where the interpreter ran them in a native stack.

Each native frame of the evaluation loop (`_PyEval_EvalFrameDefault`) is replaced, in order,
by the Python frames that call ran (one group per call, see frames.eval_groups). Native frames
between them (C extensions, the C API) and the kernel frames stay where they are. Groups left
over when the native stack ends early (no frame pointers in libpython, truncated unwinding) go
at the root end, where those calls were.
"""

from __future__ import annotations

from ...profile.model import Frame

# Only the loop itself runs frames; wrappers such as PyEval_EvalFrameEx stay native frames.
EVAL_FRAME = "_PyEval_EvalFrameDefault"


def is_eval_frame(frame: Frame) -> bool:
    return frame.name.split(".", 1)[0] == EVAL_FRAME     # also its `.cold` part


def merge(native: list[Frame], groups: list[list[Frame]]) -> list[Frame]:
    """Leaf-first native frames + leaf-first groups of Python frames -> one leaf-first stack."""
    out: list[Frame] = []
    pending = iter(groups)
    for frame in native:
        if is_eval_frame(frame):
            group = next(pending, None)
            if group is not None:
                out.extend(group)
                continue
        out.append(frame)
    for group in pending:
        out.extend(group)
    return out
