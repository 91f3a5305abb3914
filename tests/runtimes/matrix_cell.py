"""One cell of the runtime matrix (matrix.py): start a runtime's workload in a chroot, a Docker container
or a mount namespace of its own, profile it from the host until it has samples enough, and print the
verdict as one line of JSON. A process of its own per cell: the profiler's state (the runtimes it noted
unread) is this cell's alone."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig
from hotstack.runtimes.common.files import UNREAD

from matrix import INSIDE, WORKLOADS

KIND = {"python": FrameKind.PYTHON, "node": FrameKind.JS, "ruby": FrameKind.RUBY, "php": FrameKind.PHP,
        "php-fpm": FrameKind.PHP, "perl": FrameKind.PERL, "java": FrameKind.JAVA}
# Runtimes whose frames carry their source file and line: the check asks for both, of every runtime
# but these (whose frames would pass with or without them; the lines share is shown either way).
WITHOUT_LINES: set[str] = set()
HOT = {name: re.compile(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])") for name in ("hot_a", "hot_b", "work")}
LINE = re.compile(r":[1-9][0-9]*\)?$")    # a line in the frame's name ("hot_a (/hs-matrix/work.js:2)")
# The first frame of a process's threads: the entry code of the main thread, the C library's of others.
ROOTS = {"_start", "__clone3", "__clone", "clone3", "clone", "start_thread"}
WANT = 800              # samples of the work thread to judge a cell by
MAX_SECONDS = 150       # the most a cell profiles (a loaded machine gives the workload little CPU)
READY_SECONDS = 120     # the most a workload takes to print "ready" (a JVM compiling Work.java)


def start(mode: str, root: str, argv: list[str], image: str, docker_host: str, name: str,
          volume: str) -> subprocess.Popen:
    """The workload, in a session of its own (its processes stopped together, by its id)."""
    in_dir = ["sh", "-c", f'cd {INSIDE} && exec "$@"', "sh", *argv]
    if mode == "chroot":     # the host's mount namespace, another root
        cmd = ["chroot", root, *in_dir]
    elif mode == "mntns":    # a mount namespace of its own with its /proc, and its root
        cmd = ["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
               'r=$1; shift; mount -t proc proc "$r/proc" && exec chroot "$r" "$@"', "sh", root, *in_dir]
    else:
        volumes = ["-v", f"{root}{INSIDE}:{INSIDE}:ro", *(["-v", volume] if volume else [])]
        cmd = ["docker", "-H", docker_host, "run", "--rm", "--network", "none", "--name", name, *volumes,
               "-w", INSIDE, image, *argv]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_ready(proc: subprocess.Popen) -> str | None:
    """None once the workload printed "ready", else why not."""
    seen, ended = threading.Event(), threading.Event()

    def read() -> None:
        for line in proc.stdout:
            if line.startswith("ready"):
                seen.set()
                return
        ended.set()     # the workload closed its output: it exited
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READY_SECONDS)
    if seen.is_set():
        return None
    if ended.is_set():
        proc.wait(timeout=10)
    if proc.poll() is not None:
        return f"exited {proc.returncode}: {proc.stderr.read().strip()[-300:]}"
    return f"no 'ready' in {READY_SECONDS} s"


def workload_pid(proc: subprocess.Popen, runtime: str, mode: str, docker_host: str, name: str) -> int:
    """The profiled process: the workload's (chroot, unshare and sh exec each other: one pid; a
    container's first process), or for PHP-FPM its pool's worker, a process below it."""
    pid = proc.pid
    if mode == "docker":
        out = subprocess.run(["docker", "-H", docker_host, "inspect", "-f", "{{.State.Pid}}", name],
                             capture_output=True, text=True, check=True)
        pid = int(out.stdout.strip())
    if runtime == "php-fpm":
        workers = [p for p, args in descendants(pid) if args.startswith("php-fpm: pool hsm")]
        if len(workers) != 1:
            raise RuntimeError(f"{len(workers)} FPM workers below pid {pid}")
        return workers[0]
    return pid


def descendants(top: int) -> list[tuple[int, str]]:
    """(pid, command line) of each process below top."""
    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,args="], capture_output=True, text=True, check=True)
    children: dict[int, list[tuple[int, str]]] = {}
    for line in table.stdout.splitlines():
        fields = line.split(None, 2)
        children.setdefault(int(fields[1]), []).append((int(fields[0]), fields[2] if len(fields) > 2 else ""))
    below, found = [top], []
    while below:
        for pid, args in children.get(below.pop(), []):
            below.append(pid)
            found.append((pid, args))
    return found


def stop(proc: subprocess.Popen) -> None:
    """The workload's processes, by their pids: its session, and those below it that made sessions of
    their own (PHP-FPM's master and worker)."""
    for pid in [p for p, _args in descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def profile(pid: int) -> tuple[list, float]:
    """The pid's samples until its busiest thread has WANT of them (or MAX_SECONDS), and the seconds."""
    samples: list = []
    per_tid: dict[int, int] = {}
    started = time.monotonic()
    with Engine(EngineConfig(frequency=499, pids=(pid,), unwind="kernel")) as prof:
        while time.monotonic() - started < MAX_SECONDS and max(per_tid.values(), default=0) < WANT:
            time.sleep(0.5)
            for s in prof.collect()[0].samples:
                if s.pid == pid:
                    samples.append(s)
                    per_tid[s.tid] = per_tid.get(s.tid, 0) + s.value
    return samples, time.monotonic() - started


def _in_libc(frame) -> bool:
    return "/libc.so" in frame.module or frame.name.startswith("libc.so")


def reaches_root(stack) -> bool:
    """The stack ends at its thread's first frame: the entry code, the C library's thread start; or,
    in a C library stripped of its local symbols (Debian's: no `start_thread`, no `__clone3`), two
    unnamed frames of the C library below the thread's own start routine (a native function of a
    file: named, or unnamed where its file is stripped too, as JDK 8's launcher's JavaMain)."""
    if stack and stack[-1].name in ROOTS:
        return True
    tail = stack[-3:]
    return (len(tail) == 3 and tail[0].kind is FrameKind.NATIVE and (tail[0].resolved or bool(tail[0].module))
            and not _in_libc(tail[0]) and _in_libc(tail[1]) and _in_libc(tail[2]))


def has(sample, hot: str, kind: FrameKind) -> bool:
    return any(f.kind is kind and HOT[hot].search(f.name) for f in sample.stack)


def has_line(frame, runtime: str, hot: str) -> bool:
    """The frame of `hot` has its source file and a line of the function's loop, in its fields (a
    runtime in WITHOUT_LINES: any line, in its fields or its name)."""
    if runtime in WITHOUT_LINES:
        return frame.line > 0 or bool(LINE.search(frame.name))
    _header, loop = function_lines(frame.file.rpartition("/")[2], hot)
    return bool(frame.file) and frame.line in loop


@functools.cache
def function_lines(workload: str, function: str) -> tuple[int, range]:
    """The function's first line in its workload file and the lines of its loop, where its samples
    are: from the loop's first line to the one before the function's result (`return t`, Ruby's `t`).
    A stale line (the previous call's `return`) or none is not one of them."""
    path = WORKLOADS / workload
    lines = path.read_text().splitlines() if path.is_file() else []
    header = next((i for i, text in enumerate(lines)
                   if re.search(rf"\b(def|function|sub|static long) {function}\b", text)), None)
    if header is None:
        return 0, range(0)
    loop = next(i for i in range(header + 1, len(lines)) if re.search(r"\b(for|while)\b", lines[i]))
    result = next(i for i in range(loop + 1, len(lines)) if re.match(r"\s*(return\b|t\s*$)", lines[i]))
    return header + 1, range(loop + 1, result + 1)      # (1-based: the loop's line to the result's, less it)


def judge(runtime: str, samples: list) -> dict:
    kind = KIND[runtime]
    by_tid: dict[int, int] = {}
    for s in samples:
        if any(f.kind is kind for f in s.stack):
            by_tid[s.tid] = by_tid.get(s.tid, 0) + s.value
    if not by_tid:       # no runtime frames at all: judge the busiest thread
        for s in samples:
            by_tid[s.tid] = by_tid.get(s.tid, 0) + s.value
    if not by_tid:
        return {"state": "FAIL", "detail": "no samples"}
    tid = max(by_tid, key=by_tid.get)
    mine = [s for s in samples if s.tid == tid]
    total = sum(s.value for s in mine)
    named = sum(s.value for s in mine if any(has(s, h, kind) for h in HOT))
    a = sum(s.value for s in mine if has(s, "hot_a", kind))
    b = sum(s.value for s in mine if has(s, "hot_b", kind) and not has(s, "hot_a", kind))
    rooted = sum(s.value for s in mine if reaches_root(s.stack))
    split = 100.0 * a / (a + b) if a + b else 0.0
    example = max(mine, key=lambda s: s.value).stack
    lined = sum(s.value for s in mine if any(f.kind is kind and HOT[hot].search(f.name) and has_line(f, runtime, hot)
                                             for f in s.stack for hot in ("hot_a", "hot_b")))
    out = {"samples": total, "named": round(named / total, 3), "split": round(split, 1),
           "lines": round(lined / (a + b), 3) if a + b else 0.0,
           "rooted": round(rooted / total, 3), "root end": stack_text(example[-3:])}
    why = {}
    if named < 0.9 * total:
        why["named"] = f"{named} of {total} samples with {kind.value} frames hot_a/hot_b/work"
    if a + b and abs(split - 75) > 5 or not a + b:
        why["split"] = f"split {split:.1f}/{100 - split:.1f} (hot_a {a}, hot_b {b})"
    if runtime not in WITHOUT_LINES and lined < 0.9 * (a + b):
        why["lines"] = f"{lined} of {a + b} hot_a/hot_b samples with their file and a line of their loop"
    if rooted < 0.9 * total:
        why["rooted"] = f"{rooted} of {total} samples reach the root ({stack_text(example[-4:])})"
    out["state"] = "pass" if not why else "FAIL"
    out["failed"] = sorted(why)
    out["detail"] = "; ".join([*why.values(), f"a stack: {stack_text(example[:10])}"] if why else [])
    return out


def stack_text(stack) -> str:
    return " < ".join(f.name[:60] for f in stack)


def _inside(path: str, root: str) -> str:
    """A runtime's file as its own root has it: a file read through the process's mapping of it
    (/proc/PID/map_files/...) by the path it maps, the root's own prefix left out."""
    if path.startswith("/proc/"):
        try:
            path = os.readlink(path)
        except OSError:
            pass
    return path.removeprefix(root.rstrip("/"))


def cell(args: argparse.Namespace) -> dict:
    argv = json.loads(args.argv)
    proc = start(args.mode, args.root, argv, args.image, args.docker_host, args.name, args.volume)
    try:
        why = wait_ready(proc)
        if why:
            return {"state": "FAIL", "detail": f"workload: {why}"}
        pid = workload_pid(proc, args.runtime, args.mode, args.docker_host, args.name)
        samples, seconds = profile(pid)
        result = judge(args.runtime, samples)
        result["profiled"] = round(seconds, 1)
        unread = UNREAD.of(pid)
        if unread:
            doctor = subprocess.run([sys.executable, "-m", "hotstack", "doctor", "--pid", str(pid)],
                                    capture_output=True, text=True, timeout=120)
            u = unread[0]
            result["unread"] = f"{u.runtime} {u.version}: {u.reason}"
            # warns: no runtime frames, or (a runtime read in part) frames without their lines, where
            # hotstack said why and `hotstack doctor` explains it
            said = "read without" in doctor.stdout if u.partial else "NOT read" in doctor.stdout
            missing = result.get("failed") == ["lines"] if u.partial else result["named"] < 0.1
            if result["state"] != "pass" and said and missing:
                result["state"] = "warns"
                inside = _inside(u.file, args.root)
                what = f"read without {u.partial}" if u.partial else "NOT read"
                result["detail"] = f"said: {u.runtime} {u.version} in {inside}: {what}: {u.reason}"
        return result
    finally:
        if args.mode == "docker":
            subprocess.run(["docker", "-H", args.docker_host, "kill", args.name], capture_output=True)
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--runtime", "--mode", "--root", "--argv", "--image", "--docker-host", "--name", "--volume"):
        parser.add_argument(flag, default="")
    args = parser.parse_args()
    try:
        result = cell(args)
    except Exception as e:     # the cell's verdict, never a traceback in the table
        result = {"state": "FAIL", "detail": f"harness: {type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
