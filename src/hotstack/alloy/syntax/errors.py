"""Positions and the one error type of the syntax layer."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError


@dataclass(frozen=True, slots=True)
class Pos:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class AlloySyntaxError(ConfigError):
    """A config error located at file:line:column."""

    def __init__(self, pos: Pos | None, message: str) -> None:
        super().__init__(f"{pos}: {message}" if pos is not None else message)
        self.pos = pos
