"""hotstack: a continuous CPU profiler for Linux with eBPF sampling and Python userspace."""

__version__ = "0.1.0"


def _quiet_interrupt_when_run_as_the_program() -> None:
    """Ctrl-C (or a hang-up) in the first instants of `hotstack ...` lands while modules are still
    being imported, before `cli.main` can catch it: without this, Python prints a KeyboardInterrupt
    traceback. Only when hotstack is the program (the console script, or `python -m hotstack`,
    whose argv[0] is "-m" while the package is imported); a library user keeps Python's hook."""
    import os
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 != "-m" and os.path.basename(argv0) != "hotstack":
        return
    previous = sys.excepthook

    def interrupted(error: BaseException | None) -> bool:
        # An import that Ctrl-C cut can re-raise as another error (numpy: "Importing the numpy
        # C-extensions failed") with the KeyboardInterrupt as its cause or context.
        seen = 0
        while error is not None and seen < 16:
            if isinstance(error, KeyboardInterrupt):
                return True
            error, seen = error.__cause__ or error.__context__, seen + 1
        return False

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt) or interrupted(value):
            return      # Python still ends the process (by SIGINT, or status 1), as the shell expects
        previous(kind, value, tb)

    sys.excepthook = hook
    # A hang-up this early ends like Ctrl-C (quietly) instead of killing with no word; each
    # front door installs its own handling once it runs (the agent reloads, a run stops).
    import signal

    def hang_up(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGHUP, hang_up)


_quiet_interrupt_when_run_as_the_program()
