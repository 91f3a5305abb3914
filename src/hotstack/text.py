"""Text hotstack did not write (a comm, a symbol, a path, what a receiver answered) made safe for a
terminal or a log line: the one escaping function of every terminal output.

Any local process chooses its comm and its symbol names; written raw, `\\x1b]0;...\\x07` would set
an operator's window title, `\\x1b[2J` clear the screen, U+202E turn the rest of a line around.
Machine outputs (json, folded, pprof, OTLP) keep the bytes; only what people read is escaped.
"""

from __future__ import annotations

import errno
import logging


def escape(text: object) -> str:
    """`text` with every character that is not printable escaped as Python writes it (`\\x1b`,
    `\\x9b`, `\\u202e`): the C0 and C1 controls, DEL, the bidirectional overrides, isolates and
    marks (format characters), line and paragraph separators, lone surrogates (undecodable bytes).
    Bytes are read as UTF-8, an invalid byte escaped as `\\xNN`. Printable text comes back as it is."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "backslashreplace")
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, saying how many more there were."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more)"


def escape_lines(text: object) -> str:
    """escape() line by line: a message of several lines (a verifier's log) keeps its lines."""
    return "\n".join(escape(line) for line in str(text).split("\n"))


class EscapingFormatter(logging.Formatter):
    """Log lines whose message is escaped (escape_lines): a log message quotes paths, comms and
    answers from elsewhere, and the log is read in a terminal. Tracebacks are hotstack's own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_lines(record.message)
        return super().formatMessage(record)


def console(file, **options):
    """A rich Console on `file` whose write to a reader that went away (`| head`) raises
    BrokenPipeError, which the command line ends quietly with exit 0 (cli.py); rich's own answer
    is SystemExit(1) with no word, after pointing the process's stdout, not `file`, at /dev/null.
    rich is imported here, when a command draws, not when this module is."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True          # nothing more is written to a reader that left
            raise BrokenPipeError(errno.EPIPE, "the reader of the output went away")

    return PipeConsole(file=file, **options)
