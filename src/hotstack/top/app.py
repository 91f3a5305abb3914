"""The live loop of `hotstack top`: the Engine collects every interval in its own thread, this
thread reads keys and redraws (at each new interval and at each key, so a key is answered at
once, not a second later)."""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from dataclasses import dataclass, field

from .. import interrupted_while_starting
from ..errors import ConfigError, writing_stdout
from ..profile.model import Profile
from ..profile.transforms import fold_own
from ..sampling.config import COMM_MAX, EngineConfig
from ..text import console as text_console, escape
from .. import procs
from .keys import ESC, Keys
from .view import SORTS, ViewState, render
from .window import Window

KEY_POLL_S = 0.1
CLOSE_WAIT_S = 10


@dataclass
class TopOptions:
    pids: tuple[int, ...] = ()
    comms: tuple[str, ...] = ()
    frequency: int = 99
    interval: float = 1.0
    window: float = 10.0          # seconds of samples shown; 0: since start
    timeout: float = 0.0          # 0: until q or Ctrl-C
    show_hotstack: bool = False
    sort: str = "self"
    filter: str = ""
    state: ViewState = field(default_factory=ViewState)

    def validate(self) -> None:
        if not (self.interval > 0 and self.interval <= 3600):
            raise ConfigError("--interval must be a number of seconds in (0, 3600]")
        if not (0 <= self.window <= 86400):
            raise ConfigError("--window must be 0 (since start) or a number of seconds up to 86400")
        if not (0 <= self.timeout < float("inf")):
            raise ConfigError("--timeout must be 0 (until q) or a positive number of seconds")
        if self.sort not in SORTS:
            raise ConfigError(f"--sort {self.sort!r}: expected one of {', '.join(SORTS)}")
        for pid in self.pids:
            if pid <= 0 or not procs.exists(pid):
                raise ConfigError(f"--pid {pid}: no such process")
        for comm in self.comms:
            if not comm or len(comm) > COMM_MAX:
                raise ConfigError(f"--comm {comm!r}: a command name has 1 to {COMM_MAX} characters")
        self.engine_config().validate({"frequency": "--rate", "pids": "--pid"})

    def engine_config(self) -> EngineConfig:
        return EngineConfig(frequency=self.frequency, pids=self.pids, comms=self.comms,
                            own_stacks=self.show_hotstack or bool(self.comms))

    @property
    def scope(self) -> str:
        if self.pids:
            return "pid " + ",".join(map(str, self.pids))
        if self.comms:
            return "comm " + ",".join(self.comms)
        return "whole host"


def run_top(opts: TopOptions, out=None) -> int:
    from rich.live import Live

    from ..sampling.engine import Engine

    opts.validate()
    out = out if out is not None else sys.stdout
    if out is None:      # started with stdout closed (`>&-`)
        raise ConfigError("hotstack top draws on stdout, which is closed (give it a terminal, a file or a pipe)")
    interactive = out.isatty()
    console = text_console(out, highlight=False, force_terminal=interactive or None)
    state = opts.state
    state.sort, state.filter = opts.sort, opts.filter
    own = set() if opts.show_hotstack or opts.pids or opts.comms else {os.getpid()}
    window = Window(opts.window)

    if interactive:
        console.print(f"hotstack top: starting the sampler ({escape(opts.scope)}) ...", markup=False)
    engine = Engine(opts.engine_config())
    engine.start()
    profiles: queue.SimpleQueue[Profile] = queue.SimpleQueue()
    stop = threading.Event()
    finished = threading.Event()
    closed = threading.Event()
    failed: list[Exception] = []

    def sample() -> None:
        # The engine is closed by the thread that runs it, never under a collect still running.
        try:
            engine.run(opts.timeout, opts.interval, on_profile=profiles.put, stop=stop)
        except Exception as e:   # said by the main thread, once the screen is given back
            failed.append(e)
        finally:
            finished.set()
            engine.close()
            closed.set()

    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    if interrupted_while_starting():
        stop.set()
    sampler = threading.Thread(target=sample, name="hotstack-top-engine", daemon=True)
    sampler.start()

    def frame():
        notes = "hotstack's own samples in one row" if own else ""
        return render(window.sum, state, scope=opts.scope, frequency_hz=opts.frequency,
                      covered_s=window.covered_s, window_s=opts.window, height=console.size.height, notes=notes)

    try:
        if interactive:
            with Keys() as keys, Live(frame(), console=console, screen=True, auto_refresh=False,
                                      redirect_stdout=False, redirect_stderr=False) as live:
                while not (stop.is_set() or finished.is_set()):
                    changed = _answer(keys.read(KEY_POLL_S), state, stop)
                    changed |= _take(profiles, window, own, state.paused)
                    if changed:
                        live.update(frame(), refresh=True)
        else:
            # Not a terminal (a pipe, a log): one plain table per interval, no screen control.
            while True:
                done = finished.wait(KEY_POLL_S)
                if _take(profiles, window, own, False):
                    with writing_stdout():
                        console.print(frame())
                        console.print()
                if done and profiles.empty():
                    break
    finally:
        stop.set()
        for s, handler in previous.items():
            signal.signal(s, handler)
        # q answers at once: the screen is given back above; closing (perf events, maps) gets a
        # bounded wait, and what it has not finished the process's exit finishes.
        closed.wait(timeout=CLOSE_WAIT_S)
    if failed:
        raise failed[0]
    return 0


def _take(profiles: queue.SimpleQueue, window: Window, own: set[int], paused: bool) -> bool:
    """Add the profiles that arrived to the window (dropped while paused); True if any."""
    got = False
    while True:
        try:
            profile = profiles.get_nowait()
        except queue.Empty:
            return got
        got = True
        if not paused:
            window.add(fold_own(profile, own))


def _answer(keys: list[str], state: ViewState, stop: threading.Event) -> bool:
    """Apply keys to the view state; True if anything changed."""
    for key in keys:
        if state.editing:
            if key in ("\n", ESC):
                state.editing = False
                if key == ESC:
                    state.filter = ""
            elif key == "\x7f":
                state.filter = state.filter[:-1]
            elif key.isprintable():
                state.filter += key
            continue
        if key in ("q", "Q"):
            stop.set()
        elif key == "s":
            state.sort = "self"
        elif key == "t":
            state.sort = "total"
        elif key == "n":
            state.sort = "name"
        elif key == "/":
            state.editing, state.filter = True, ""
        elif key == ESC:
            state.filter = ""
        elif key == "p":
            state.paused = not state.paused
    return bool(keys)
