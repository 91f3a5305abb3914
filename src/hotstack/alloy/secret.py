"""Secret values of the config (tokens, passwords, header values), as Alloy's `secret` type.

A Secret is not a string: printing, formatting, logging or serializing it gives `(secret)`,
so that a page, an API answer, a log line or an error message cannot show the value by
accident. The one way to the value is `reveal()`, called where the value leaves the process
(an Authorization header, a TLS key given to ssl).
"""

from __future__ import annotations

from ..export.delivery import redact_url  # noqa: F401 (one home for it: the push client redacts too)

SHOWN = "(secret)"


class Secret:
    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        self._value = str(value)

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __repr__(self) -> str:
        return SHOWN

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return SHOWN

    def __reduce__(self):   # never pickled, copied to a debug dump or a subprocess by value
        raise TypeError("a Secret cannot be pickled")

    def __copy__(self) -> "Secret":
        return self

    def __deepcopy__(self, memo) -> "Secret":
        return self


def reveal(value: "Secret | str") -> str:
    """The plain value of a Secret (or of a str, for callers given either)."""
    return value.reveal() if isinstance(value, Secret) else value


def shown(value: object) -> object:
    """What pages and APIs show for a value: `(secret)` for a set secret, '' for an unset one,
    a string with the passwords of its URLs redacted."""
    if isinstance(value, Secret):
        return SHOWN if value else ""
    if isinstance(value, str):
        return redact_url(value)
    return value
