"""Runtime values of Alloy expressions, held as plain Python values.

null -> None, bool, number -> int/float, string -> str, array -> list, object -> dict.
Functions and capsules (opaque values such as a ProfilesReceiver) are the two extra kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Function:
    name: str
    call: Callable[..., object]
    min_args: int = 0
    max_args: int | None = None   # None = variadic


class Capsule:
    """An opaque value passed between components; `capsule_type` names what it is."""

    capsule_type = "capsule"


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, Function):
        return "function"
    if isinstance(value, Capsule):
        return f"capsule({value.capsule_type})"
    return type(value).__name__


def is_zero(value: object) -> bool:
    """Alloy's notion of an empty value (used by coalesce)."""
    return value is None or value is False or value == 0 and not isinstance(value, bool) or value in ("", [], {})
