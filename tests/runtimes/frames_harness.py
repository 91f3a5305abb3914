"""One harness for the interpreters' frame tests (Perl, PHP, Ruby): run the interpreter's workload
(tests/runtimes/<runtime>/workload.*: <main> -> run -> step -> hot_a (3 parts) | hot_b (1 part), each
-> burn, printing one JSON line when it starts), profile it with the real Engine, collect until there
are samples enough, and check the frames: names and callers' order, the 75/25 split, lines, native
frames beside them. PERL, PHP and RUBY (at the end) are the three runtimes' parameters; each
runtime's test module adds its own checks."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hotstack.procs import ProcessTable
from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.symbols.symbolizer import Symbolizer
from tests.peers import require_tool
from tests.runtime_fixtures import runtime_source
from tests.stack_totals import totals_by_name

HERE = Path(__file__).resolve().parent
_PROCESSES = ProcessTable()
_SYMBOLIZER = Symbolizer(_PROCESSES)
HOT_SHARE = 75          # percent of hot_a among samples in hot_a or hot_b: what the workloads are built to have


def engine(**config) -> Engine:
    """An Engine at 499 Hz over the harness's process table and symbolizer (kept across tests)."""
    return Engine(EngineConfig(frequency=499, **config), symbolizer=_SYMBOLIZER, processes=_PROCESSES)


def collect_until(prof: Engine, enough: Callable[[list], bool], max_seconds: float) -> list:
    """Samples collected every 0.5 s until `enough(samples)` or `max_seconds` (a loaded CI machine
    may give the workload a fraction of a CPU)."""
    samples: list = []
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline and not enough(samples):
        time.sleep(0.5)
        samples.extend(prof.collect()[0].samples)
    return samples


def profile_until(pid: int, enough: Callable[[list], bool], max_seconds: float, **config) -> list:
    """Process `pid` profiled until `enough(samples)` or `max_seconds`."""
    with engine(pids=(pid,), **config) as prof:
        return collect_until(prof, enough, max_seconds)


def profile_for(pid: int, seconds: float, **config) -> list:
    """Process `pid`'s samples of one interval of `seconds`, from an Engine of its own at 499 Hz."""
    with Engine(EngineConfig(frequency=499, pids=(pid,), **config)) as prof:
        time.sleep(seconds)
        return prof.collect()[0].samples


@contextmanager
def stopping(proc: subprocess.Popen):
    """`proc`, killed (by its pid) and waited for when the block ends."""
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def gadget_engine_config(*flags: str) -> EngineConfig:
    """The EngineConfig that `hotstack run profile_cpu FLAGS` runs with."""
    import argparse
    from hotstack.gadget.cli import add_arguments, profile_run_options
    p = argparse.ArgumentParser()
    add_arguments(p)
    return profile_run_options(p.parse_args(["profile_cpu", *flags])).engine_config()


def assert_no_flag_leaves_native_frames(pid: int, flag: str, kind: FrameKind) -> None:
    """`hotstack run profile_cpu FLAG --pid PID` for 1.5 s: the process is sampled, with no frame of `kind`."""
    with Engine(gadget_engine_config(flag, "--pid", str(pid), "--sample-rate", "499")) as prof:
        samples = prof.run(1.5).samples
    assert sum(s.value for s in samples) >= 50
    assert not any(f.kind is kind for s in samples for f in s.stack)


def assert_counted_in_agent_metrics(pid: int, runtime: str) -> None:
    """The agent's /metrics after 1.5 s of process `pid` show `runtime`'s frame source: the process
    attached, frames walked, functions named, and its read errors' counter."""
    from prometheus_client import CollectorRegistry, generate_latest
    from hotstack.alloy.components.ebpf_metrics import EbpfMetrics
    registry = CollectorRegistry()
    metrics = EbpfMetrics.of(registry)
    with Engine(EngineConfig(frequency=499, pids=(pid,))) as prof:
        profile = prof.run(1.5)
        metrics.observe_profile(profile, prof)
        text = generate_latest(registry).decode()
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("hotstack_runtime_")}
    events = f'hotstack_runtime_events_total{{runtime="{runtime}",what='
    assert values[f'hotstack_runtime_processes{{runtime="{runtime}"}}'] == 1, values
    assert values[events + '"frames"}'] > 100, values
    assert values[events + '"functions_named"}'] >= 3, values
    assert events + '"read_errors"}' in values


def total(samples) -> int:
    return sum(s.value for s in samples)


@dataclass(frozen=True)
class Interpreter:
    """An interpreter's frame tests' parameters: its runtime's name (the frame source's, the command's
    and `runtimes_off`'s), its frames' kind, its workload, the name of its outermost frame and how
    it names the workload's methods (`method.format(name)`)."""

    runtime: str
    kind: FrameKind
    workload: Path
    main: str
    method: str

    def frames(self, sample) -> list:
        """The sample's frames of this interpreter, root first."""
        return [f for f in reversed(sample.stack) if f.kind is self.kind]

    def names(self, sample) -> list[str]:
        return [f.name for f in self.frames(sample)]

    @property
    def hot(self) -> tuple[str, str]:
        return self.method.format("hot_a"), self.method.format("hot_b")

    def start(self, seconds: str, *flags: str, script: Path | None = None, env: dict | None = None) -> subprocess.Popen:
        """The workload (or `script`) started with `flags`, once it has printed its JSON line."""
        proc = subprocess.Popen([require_tool(self.runtime), *flags, str(script or self.workload), seconds],
                                stdout=subprocess.PIPE, text=True, env=env)
        json.loads(proc.stdout.readline())
        return proc

    @contextmanager
    def running(self, seconds: str, *flags: str, script: Path | None = None):
        """The started workload, killed (by its pid) when the block ends."""
        with stopping(self.start(seconds, *flags, script=script)) as proc:
            yield proc

    def hot_share(self, samples) -> tuple[float, int]:
        """(percent of hot_a among the samples in hot_a or hot_b, their count)."""
        c = totals_by_name(((self.names(s), s.value) for s in samples), self.hot)
        both = sum(c.values())
        return (100.0 * c[self.hot[0]] / both if both else 0.0), both

    def assert_split(self, samples) -> tuple[float, int]:
        """hot_a's share and the count of hot samples, once it is checked: 300+ samples, 75% within 5 points."""
        share, both = self.hot_share(samples)
        assert both >= 300, f"only {both} samples in hot_a/hot_b"
        assert abs(share - HOT_SHARE) <= 5, f"hot_a has {share:.1f}% of {both} samples (built: {HOT_SHARE}%)"
        return share, both

    def hot_samples(self, samples) -> list:
        """The samples in hot_a or hot_b, each one's callers checked, root first:
        <main> -> run -> step -> hot, then burn or nothing."""
        found = []
        for s in samples:
            names = self.names(s)
            hot = next((h for h in self.hot if h in names), None)
            if hot is None:
                continue
            assert names[:4] == [self.main, self.method.format("run"), self.method.format("step"), hot], names
            assert names[4:5] in ([], [self.method.format("burn")]), names
            found.append(s)
        return found

    def assert_lines(self, samples, lines: dict[str, range]) -> None:
        """Every frame of this interpreter named in `lines` is in the workload, at a line of that range."""
        for s in samples:
            for f in self.frames(s):
                if f.name in lines:
                    assert Path(f.file) == self.workload, f
                    assert f.line in lines[f.name], f

    def assert_off_leaves_native_frames(self, native: str | None = None) -> None:
        """With this runtime off, its process is still sampled, with no frame of its kind (and, if
        given, with the native function `native` on some stack)."""
        with self.running("60") as proc:
            samples = profile_until(proc.pid, lambda got: total(got) >= 200, 6, runtimes_off=(self.runtime,))
        assert total(samples) >= 50
        assert not any(f.kind is self.kind for s in samples for f in s.stack)
        if native is not None:
            assert any(f.name == native for s in samples for f in s.stack)

    def started_after_profiler(self) -> tuple[Counter, dict]:
        """A workload started after sampling began (sampling only this interpreter's commands) that
        ran 1.5 s and exited: the count of each name of its frames and the frame source's stats,
        once its walks are checked (at least one a sample with frames of this interpreter)."""
        with engine(comms=(self.runtime,)) as prof:
            proc = subprocess.Popen([require_tool(self.runtime), str(self.workload), "1.5"], stdout=subprocess.DEVNULL)
            proc.wait(timeout=30)
            time.sleep(0.3)
            samples = [s for s in prof.collect()[0].samples if s.pid == proc.pid]
            stats = runtime_source(prof, self.runtime).stats()
        assert stats["walks"] >= sum(s.value for s in samples if self.names(s)) > 0, stats
        names = Counter(n for s in samples for n in self.names(s))
        assert names[self.hot[0]] > 0 and names[self.hot[1]] > 0, names.most_common(8)
        return names, stats


# hs_spin, a function that spins for ever, in each runtime's language (run by -c, -e or -r)
SPIN = {
    FrameKind.PYTHON: "def hs_spin():\n    while True:\n        pass\nhs_spin()\n",
    FrameKind.JS: "function hs_spin() { let x = 0; for (;;) { x = (x + 1) | 0; } } hs_spin();",
    FrameKind.PHP: "function hs_spin() { $x = 0; while (true) { $x++; } } hs_spin();",
    FrameKind.PERL: "sub hs_spin { my $x = 0; while (1) { $x++ } } hs_spin();",
    FrameKind.RUBY: "def hs_spin; x = 0; loop { x += 1 }; end; hs_spin",
}

PERL = Interpreter("perl", FrameKind.PERL, HERE / "perl" / "workload.pl", main="<main>", method="Workload::{}")
PHP = Interpreter("php", FrameKind.PHP, HERE / "php" / "workload.php", main="{main}", method="Workload::{}")
RUBY = Interpreter("ruby", FrameKind.RUBY, HERE / "ruby" / "workload.rb", main="<main>", method="Workload#{}")
