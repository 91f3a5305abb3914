"""The one error base class of hotstack.

Only the CLI prints errors; every layer raises a HotstackError (or a subclass)
whose message is one line that says what failed and what to do about it.
"""

from __future__ import annotations

from contextlib import contextmanager


class HotstackError(Exception):
    """An error meant for people: one line, and the exit code to leave with."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(HotstackError):
    """Bad input: flags, config files, arguments."""


class PrivilegeError(HotstackError):
    """The host does not allow what we need (capabilities, sysctls, limits)."""


class OutputError(HotstackError):
    """hotstack's output cannot be written (stdout closed, on a full disk...)."""

    exit_code = 1


class EngineFailed(HotstackError):
    """A background thread of the sampling engine failed again and again: the profiles would miss
    new processes or unwind tables from then on (sampling/engine.py)."""

    exit_code = 1


@contextmanager
def writing_stdout():
    """An error writing stdout (a full disk, a closed descriptor) as one line; a reader that went
    away (`| head`) stays a BrokenPipeError, which ends the run quietly."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write to stdout: {e.strerror or e}") from None
