"""Files of hotstack's on-disk caches (the kernel BTF's type index, the unwind tables): read within
a bound, written whole or not at all.

A cache entry is never worth failing or stalling a run for: a file cut short, grown, sparse, of
another format, or not a regular file is removed with one log line, and its caller builds the
entry again. Nothing is read before its size is checked against what the entry can be (a sparse
file of 50 GB was read whole). A save that fails (a full or read-only filesystem) leaves no
temporary file behind, and the temporary files of processes that died mid-save are removed
before a process's first save into a directory.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger("hotstack.cache")
TMP_SUFFIX = ".tmp"

_swept: set[str] = set()           # directories whose stale temporary files this process removed
_swept_lock = threading.Lock()


def directory(name: str, variable: str) -> str:
    """Where the `name` cache lives: $`variable` ('' disables it), else $XDG_CACHE_HOME/hotstack/NAME
    or ~/.cache/hotstack/NAME."""
    explicit = os.environ.get(variable)
    if explicit is not None:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hotstack", name)


def read(path: str, fits: Callable[[int, bytes], str], head: int = 0,
         damaged: Callable[[], None] = lambda: None) -> bytes | None:
    """The bytes of cache file `path`, or None if there is none, or if it was damaged (removed
    then, and `damaged()` called). `fits(size, first head bytes)` says what is wrong with a file of
    that size and header ('' if nothing is): only a file it accepts is read."""
    wrong = ""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        wrong = f"cannot be opened ({e.strerror})"
    else:
        data, wrong = _checked_read(fd, fits, head)
    if wrong:
        discard(path, wrong)
        damaged()
        return None
    return data


def _checked_read(fd: int, fits: Callable[[int, bytes], str], head: int) -> tuple[bytes, str]:
    """(the bytes of the open file `fd`, '') if `fits` accepts its size and header, else (b'',
    what is wrong with it). Closes fd."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b"", "is not a regular file"
        header = os.pread(fd, head, 0) if head else b""
        wrong = fits(st.st_size, header) if len(header) == head else f"is {st.st_size} bytes, short of a header"
        if wrong:
            return b"", wrong
        data = _read_all(fd, st.st_size)
    except OSError as e:
        return b"", f"cannot be read ({e.strerror})"
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        return b"", f"changed while read ({len(data)} of {st.st_size} bytes)"
    return data, ""


def _read_all(fd: int, size: int) -> bytes:
    chunks = []
    got = 0
    while got < size:
        chunk = os.pread(fd, size - got, got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def discard(path: str, why: str) -> None:
    """A damaged cache file: one log line, and removed (its entry is built again)."""
    log.warning("cache file %s %s: removed, built again", path, why)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("cache file %s could not be removed: %s", path, e.strerror)


def write(path: str, parts: Iterable[bytes]) -> bool:
    """Write `parts` to `path` through PATH.PID.tmp and a rename: readers see the whole file or
    none. False if it could not be written (the temporary file is removed then)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.{os.getpid()}{TMP_SUFFIX}"
    try:
        os.makedirs(directory, exist_ok=True)
        sweep_stale(directory)
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
        return True
    except OSError as e:
        log.debug("cache file %s not saved: %s", path, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def sweep_stale(directory: str) -> None:
    """Remove the temporary files (NAME.PID.tmp) that processes which no longer run left in
    `directory` (a crash mid-save); once per directory and process."""
    with _swept_lock:
        if directory in _swept:
            return
        _swept.add(directory)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        pid = _tmp_owner(name)
        if pid is not None and pid != os.getpid() and not _runs(pid):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def _tmp_owner(name: str) -> int | None:
    """The pid in a temporary file's name NAME.PID.tmp, else None."""
    if not name.endswith(TMP_SUFFIX):
        return None
    pid = name[:-len(TMP_SUFFIX)].rpartition(".")[2]
    return int(pid) if pid.isdigit() and int(pid) > 0 else None


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:         # another user's: it runs
        return True
    return True
