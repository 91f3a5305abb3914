"""Single keys from the terminal, without Enter and without echo (cbreak mode), restored on exit.

Plain termios: it works in any terminal, over SSH and under tmux alike. Ctrl-C still raises
SIGINT (cbreak keeps signals). Without a terminal on stdin there are no keys (top runs until
stopped)."""

from __future__ import annotations

import os
import select
import sys
import termios
import tty

ESC = "\x1b"


class Keys:
    def __init__(self, stream=None) -> None:
        stream = stream if stream is not None else sys.stdin
        self.fd = stream.fileno() if stream.isatty() else None
        self._saved = None

    def __enter__(self) -> "Keys":
        if self.fd is not None:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def read(self, timeout: float) -> list[str]:
        """Keys pressed within `timeout` s: printable characters, ESC, "\\n", "\\x7f" (backspace).
        Escape sequences (arrows, function keys) are dropped whole, so a stray arrow is not an Esc."""
        if self.fd is None:
            select.select([], [], [], timeout)
            return []
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        data = os.read(self.fd, 64).decode("utf-8", "replace")
        keys: list[str] = []
        i = 0
        while i < len(data):
            ch = data[i]
            if ch == ESC and i + 1 < len(data) and data[i + 1] in "[O":
                i += 2   # CSI/SS3: skip to the final byte (a letter or ~)
                while i < len(data) and not (data[i].isalpha() or data[i] == "~"):
                    i += 1
                i += 1
                continue
            keys.append("\n" if ch == "\r" else "\x7f" if ch == "\b" else ch)
            i += 1
        return keys
