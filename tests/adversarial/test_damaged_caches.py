"""hotstack's on-disk caches damaged or out of room (issue 47, items 8-10): the kernel BTF's type
index and the unwind tables. A damaged entry is removed with one log line and built again, never
read whole past its bound, never fatal; a save on a full filesystem leaves no temporary file, and
those of processes that died mid-save are cleared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VMLINUX = "/sys/kernel/btf/vmlinux"
# Builds (or reads back) one entry of a cache in `cache_dir` in a process whose address space is
# bounded once its imports are done (a file read whole past that bound fails the probe), and says
# what it got, how long it took and its peak RSS; hotstack's log lines go to stderr.
PROBE = r"""
import json, logging, resource, sys, time
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
from hotstack.ebpf.btf import Btf
from hotstack.symbols.elf import ElfFile
from hotstack.unwind.table_cache import TableCache
kind, cache_dir, target = sys.argv[1:4]
limit = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
started = time.monotonic()
if kind == "btf":
    size = len(Btf.from_file(target, cache_dir))
else:
    size = len(TableCache(directory=cache_dir).get(ElfFile(target)))
print(json.dumps({"size": size, "seconds": time.monotonic() - started,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def probe(kind: str, cache_dir: Path, target: str, prefix: list[str] = ()) -> tuple[dict, list[str]]:
    """(what PROBE printed, hotstack.cache's log lines)."""
    r = subprocess.run([*prefix, sys.executable, "-c", PROBE, kind, str(cache_dir), target],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return json.loads(r.stdout), [ln for ln in r.stderr.splitlines() if ln.startswith("hotstack.cache ")]


def an_elf() -> str:
    return os.path.realpath(shutil.which("ls"))


def only_entry(cache_dir: Path) -> Path:
    (path,) = list(cache_dir.iterdir())
    return path


def damage(path: Path, how: str) -> None:
    """Damage the cache file at `path` as a broken disk or a hostile user would."""
    whole = path.read_bytes()
    if how == "cut short":
        path.write_bytes(whole[:len(whole) - 3])
    elif how == "half":
        path.write_bytes(whole[:len(whole) // 2 // 8 * 8])
    elif how == "garbage":
        path.write_bytes(os.urandom(len(whole)))
    elif how.startswith("sparse"):        # its own bytes, then a hole to the size: `truncate -s`
        os.truncate(path, int(how.split()[1]) << 30)
    elif how == "fifo":                   # opened for reading, a FIFO blocks until a writer comes
        path.unlink()
        os.mkfifo(path)
    else:
        raise ValueError(how)


DAMAGES = ["cut short", "half", "garbage", "sparse 3", "sparse 50", "fifo"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_unwind_table_is_removed_unread_and_built_again(tmp_path, how):
    """Item 8: a table file of 3 GB (a sparse one) had been read whole: `--timeout 2` ran 14 s at
    2.9 GB of RSS, and at 50 GB the start failed with an empty reason. Its size is now checked
    against its header first."""
    cache_dir = tmp_path / "unwind"
    clean, _ = probe("table", cache_dir, an_elf())
    path = only_entry(cache_dir)
    whole = path.read_bytes()
    damage(path, how)
    got, lines = probe("table", cache_dir, an_elf())
    assert got["size"] == clean["size"], got
    assert got["rss_mb"] < 1024 and got["seconds"] < 60, got
    assert len(lines) == 1 and str(path) in lines[0] and "removed" in lines[0], lines
    assert path.read_bytes() == whole            # built again, and saved
    assert probe("table", cache_dir, an_elf())[1] == []


@pytest.mark.skipif(not os.path.exists(VMLINUX), reason="the kernel has no BTF")
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_btf_index_is_removed_unread_and_built_again(tmp_path, how):
    """Item 9: an index cut short made every later run fail ("bytes length not a multiple of item
    size") until it was deleted by hand, and one of 3 GB was read whole (4.2 GB of RSS)."""
    cache_dir = tmp_path / "btf"
    clean, _ = probe("btf", cache_dir, VMLINUX)
    path = only_entry(cache_dir)
    whole = path.read_bytes()
    damage(path, how)
    got, lines = probe("btf", cache_dir, VMLINUX)
    assert got["size"] == clean["size"], got
    assert got["rss_mb"] < 1024 and got["seconds"] < 60, got
    assert len(lines) == 1 and str(path) in lines[0] and "removed" in lines[0], lines
    assert path.read_bytes() == whole
    assert probe("btf", cache_dir, VMLINUX)[1] == []


def dead_pid() -> int:
    """The pid of a process that ran and was reaped (not reused within the test, the kernel handing
    pids out in turn)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.root
@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is needed")
@pytest.mark.parametrize("kind", ["btf", "table"])
def test_a_save_on_a_full_filesystem_leaves_no_temporary_file(tmp_path, kind):
    """Item 10: on a full filesystem each save left its NAME.PID.tmp, run after run. Here the
    cache is a small tmpfs (mounted in a mount namespace of the probe's own), filled: the save fails, its temporary file goes, and so does one a dead process left,
    while a live process's stays (it may be writing it)."""
    if kind == "btf" and not os.path.exists(VMLINUX):
        pytest.skip("the kernel has no BTF")
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    dead, live = f"btf-index-0123.{dead_pid()}.tmp", f"k5-0123.table.{os.getpid()}.tmp"
    script = (f"mount -t tmpfs -o size=128k tmpfs {cache_dir} && "
              f"touch {cache_dir}/{dead} {cache_dir}/{live} && "
              f"(dd if=/dev/zero of={cache_dir}/fill bs=4k 2>/dev/null; true) && "
              f'"$0" "$@" && ls -a {cache_dir}')
    target = VMLINUX if kind == "btf" else an_elf()
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                        sys.executable, "-c", PROBE, kind, str(cache_dir), target],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[0])
    left = set(r.stdout.splitlines()[1:]) - {".", ".."}
    assert got["size"] > 0
    assert left == {"fill", live}, left          # no entry (it did not fit), no temporary file
