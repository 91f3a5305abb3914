"""Ruby frames through the real BPF sampler, against the distribution's ruby (3.1 on Debian 12)."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from tests.peers import require_tool
from tests.runtime_fixtures import runtime_source
from tests.runtimes.frames_harness import RUBY, engine, profile_until

from rb_helpers import WORKLOAD, rbspy

pytestmark = pytest.mark.root
ruby_names = RUBY.names

# Lines of the workload's methods (def .. end), to check the lines frames carry.
_SOURCE = WORKLOAD.read_text().splitlines()


def _def_range(name: str) -> range:
    start = next(i for i, line in enumerate(_SOURCE, 1) if line.strip() == f"def {name}" or
                 line.strip().startswith(f"def {name}("))
    end = next(i for i in range(start, len(_SOURCE) + 1) if _SOURCE[i - 1] == "  end")
    return range(start, end + 1)


def rbspy_share(pid: int, seconds: int, out: Path) -> tuple[float, int] | None:
    """hot_a's share as rbspy (an independent profiler, from crates.io) sees the same process."""
    tool = rbspy()
    if tool is None:
        return None
    # --on-cpu: samples of the process on a CPU only, as hotstack's; --nonblocking: never paused
    subprocess.run([tool, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "199", "--nonblocking",
                    "--on-cpu", "--format", "collapsed", "--file", str(out), "--silent"], check=True,
                   capture_output=True, timeout=seconds + 60)
    c = Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" - ")[0].strip() for f in stack.split(";")]
        for hot in ("hot_a", "hot_b"):
            if any(f == hot or f.endswith(f"#{hot}") for f in frames):
                c[hot] += int(count)
    total = c["hot_a"] + c["hot_b"]
    return (100.0 * c["hot_a"] / total if total else 0.0), total


@pytest.mark.shares
def test_shares_order_and_lines(ruby_target, tmp_path):
    t = ruby_target(require_tool("ruby"), WORKLOAD, "60")
    samples = profile_until(t.pid, lambda got: RUBY.hot_share(got)[1] >= 1200, 12)
    share, _ = RUBY.assert_split(samples)

    lines = {f"Workload#{m}": _def_range(m) for m in ("hot_a", "hot_b", "burn", "step", "run")}
    # caller order, root first: <main> -> run -> step -> hot -> burn (methods with their class)
    hot_samples = RUBY.hot_samples(samples)
    RUBY.assert_lines(hot_samples, lines)
    assert len(hot_samples) >= 300

    # C functions are named: the clock read that burn spins on is the leaf Ruby frame, above burn.
    cfunc = Counter(ruby_names(s)[-1] for s in samples if "Workload#burn" in ruby_names(s))
    assert cfunc["Process.clock_gettime"] > 0, cfunc.most_common(5)
    # native frames below the VM stay
    assert any(f.kind is FrameKind.NATIVE for s in samples for f in s.stack)

    # the same process seen by rbspy (if the peer could be built): the same split
    theirs = rbspy_share(t.pid, 6, tmp_path / "rbspy.txt")
    if theirs is not None:
        assert theirs[1] >= 100, f"rbspy saw only {theirs[1]} samples"
        assert abs(theirs[0] - share) <= 5, f"hotstack {share:.1f}% vs rbspy {theirs[0]:.1f}%"


def test_no_ruby_leaves_native_frames():
    RUBY.assert_off_leaves_native_frames()


def test_started_after_profiler_and_exited_keep_names():
    """A Ruby process started after sampling began is found; once it exits its frames keep their names.
    (Sampling only `ruby` commands: on a busy machine the whole host's new processes would delay the
    look at this one past its short life.)"""
    names, stats = RUBY.started_after_profiler()
    assert stats["iseqs_read"] > 0, stats
    # Only code freed before it was read (eval'd gemspecs, files whose loading ended) may be unknown.
    assert names["[unknown ruby]"] <= 0.05 * sum(names.values()), names.most_common(8)
    # C functions keep their names too (the symbol table is found through this process's root,
    # also when an earlier Ruby process of the same libruby is gone)
    assert names["Process.clock_gettime"] > 0, names.most_common(8)
    assert names["[unknown ruby C function]"] <= 0.05 * sum(names.values()), names.most_common(8)


IDLE_THEN_BUSY = """
def burn(t)
  e = Process.clock_gettime(Process::CLOCK_MONOTONIC) + t
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < e
  x
end
$stdout.puts "ready"
$stdout.flush
sleep 2.5
burn(0.6)
"""


def test_idle_process_costs_no_naming_passes_and_is_named_once_it_works(tmp_path):
    """While a listed Ruby process sleeps, the walker does not walk it and the naming passes stop
    reading the kernel's map of recorded stacks (the walker's counter says nothing was recorded);
    once it works again, its frames are named before it exits (0.6 s after it woke)."""
    ruby = require_tool("ruby")
    script = tmp_path / "idle_then_busy.rb"
    script.write_text(IDLE_THEN_BUSY)
    with engine(comms=("ruby",)) as prof:
        source = runtime_source(prof, "ruby")
        reads = []
        # the passes take the recorded stacks out of the kernel (InterpreterSource.poll)
        take = source._kernel.take
        source._kernel.take = lambda buffer: reads.append(buffer) or take(buffer)
        proc = subprocess.Popen([ruby, str(script)], stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(0.6)             # its last walks' passes (and their second look) are done
            idle_from = len(reads)
            time.sleep(1.5)             # asleep: some 7 rounds of the pid watcher
            idle_reads = len(reads) - idle_from
            proc.wait(timeout=30)
        finally:
            proc.kill()
            proc.wait()
        assert proc.pid in source._procs, "the Ruby process was not listed"
        time.sleep(0.3)
        samples = [s for s in prof.collect()[0].samples if s.pid == proc.pid]
    assert idle_reads <= 2, f"{idle_reads} reads of the recorded stacks while the process slept"
    names = Counter(n for s in samples for n in ruby_names(s))
    assert names["Object#burn"] >= 20, names.most_common(8)
    assert names["[unknown ruby]"] <= 0.05 * sum(names.values()), names.most_common(8)
