"""A flag one thread raises and another waits on, with a timeout, for little CPU.

A timed threading.Event.wait acquires a lock with a timeout: on a loaded host each such wake-up
costs ~80 us of the waiting thread's CPU, where an epoll wait on an eventfd costs ~45 (and
time.sleep about as much). That is on this project's test machine, a VM where every timer
wake-up is an exit to the hypervisor. The engine's background threads wake several times a second.
"""

from __future__ import annotations

import os
import select


class Wakeup:
    """set() from any thread; wait(timeout) -> whether it was set (and clears it); clear()."""

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._poll = select.epoll()
        self._poll.register(self.fd, select.EPOLLIN)

    def set(self) -> None:
        if self.fd >= 0:      # (closed: nobody waits any more)
            os.eventfd_write(self.fd, 1)

    def wait(self, timeout: float) -> bool:
        if not self._poll.poll(timeout):
            return False
        self.clear()
        return True

    def clear(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:    # not set
            pass

    def close(self) -> None:
        if self.fd >= 0:
            self._poll.close()
            os.close(self.fd)
            self.fd = -1
