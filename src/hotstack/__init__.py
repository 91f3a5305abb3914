"""hotstack: a continuous CPU profiler for Linux with eBPF sampling and Python userspace."""

__version__ = "0.1.0"


stopped_by_user = False      # set by stop_while_starting: a SIGINT or SIGHUP came


def stop_while_starting(signum, frame) -> None:
    """The SIGINT/SIGHUP handler until a front door installs its own: remember that the user
    stopped us, and raise KeyboardInterrupt. An import that Ctrl-C cut can surface as any other
    error (numpy: "Importing the numpy C-extensions failed", caused by an ImportError raised in C
    code with no trace of the KeyboardInterrupt), so the flag, not the exception, says why."""
    global stopped_by_user
    stopped_by_user = True
    raise KeyboardInterrupt


def interrupted_while_starting() -> bool:
    """A SIGINT or SIGHUP came before the front door installed its own handlers. Its
    KeyboardInterrupt may have been lost (raised where Python could not deliver it) or turned into
    another error (an import it cut): a front door stops as if the signal had come to its own
    handler, and cli.main ends as Ctrl-C ends."""
    return stopped_by_user


def _run_as_the_program() -> bool:
    """`hotstack ...` (the console script), or `python -m hotstack`, whose argv[0] is "-m" while the
    package is imported; not a library user's program."""
    import os
    import sys

    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 == "-m" or os.path.basename(argv0) == "hotstack"


def _one_blas_thread_when_run_as_the_program() -> None:
    """hotstack uses numpy's vector operations and never its BLAS, whose OpenBLAS starts a thread
    per CPU at import that spins a while: ~0.07 CPU-s of a 0.5 CPU-s start (bench/startup.py).
    A user's own setting wins."""
    if _run_as_the_program():
        import os

        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _quiet_interrupt_when_run_as_the_program() -> None:
    """Ctrl-C (or a hang-up) in the first instants of `hotstack ...` lands while modules are still
    being imported, before `cli.main` can catch it: without this, Python prints a traceback. Only
    when hotstack is the program (the console script, or `python -m hotstack`, whose argv[0] is
    "-m" while the package is imported); a library user keeps Python's hook and handlers."""
    import sys

    if not _run_as_the_program():
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        if stopped_by_user or issubclass(kind, KeyboardInterrupt):
            return      # Python still ends the process (by SIGINT, or status 1), as the shell expects
        previous(kind, value, tb)

    sys.excepthook = hook      # first: importing signal below can be cut too
    previous_unraisable = sys.unraisablehook

    def unraisable(info):
        # Ctrl-C that lands while Python runs a callback it cannot raise from (importlib's module
        # lock is freed by a weakref callback) is printed as "Exception ignored in ..." with a
        # traceback, and the exception is lost: the flag keeps the request, so a front door that
        # starts after it stops at once (interrupted_while_starting).
        if stopped_by_user and issubclass(info.exc_type, KeyboardInterrupt):
            return
        previous_unraisable(info)

    sys.unraisablehook = unraisable
    import signal

    # A hang-up this early ends like Ctrl-C (quietly) instead of killing with no word; each front
    # door installs its own handling once it runs (the agent reloads, a run stops and flushes).
    signal.signal(signal.SIGINT, stop_while_starting)
    signal.signal(signal.SIGHUP, stop_while_starting)


_quiet_interrupt_when_run_as_the_program()
_one_blas_thread_when_run_as_the_program()
