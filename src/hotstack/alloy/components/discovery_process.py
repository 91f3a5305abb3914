"""discovery.process: one target per process of this host (read by procs/)."""

from __future__ import annotations

import pwd
import re
import threading

from ... import procs
from ..component import Component, register
from ..schema import BOOL, DURATION, TARGETS, Arg, BlockArg, Schema
from .targets import container_id_of_target

# The pattern discovery.process uses on each /proc/PID/cgroup line (see the research notes, §3).
_CGROUP_CID = re.compile(r"^.*/(?:.*-)?([0-9a-f]{64})(?:\.|\s*$)")

DISCOVER_CONFIG = Schema([
    Arg("exe", BOOL, True), Arg("cwd", BOOL, True), Arg("commandline", BOOL, True),
    Arg("container_id", BOOL, True), Arg("cgroup_path", BOOL, False),
    Arg("username", BOOL, False), Arg("uid", BOOL, False),
])


def process_target(pid: int, cfg: dict, users: dict[int, str]) -> dict[str, str] | None:
    """The labels of one process, or None when it cannot be read (gone, or a kernel thread)."""
    read = procs.process_labels(pid, cfg["exe"], cfg["cwd"], cfg["commandline"],
                                cfg["container_id"] or cfg["cgroup_path"])
    if read is None:
        return None
    exe, cwd, cmdline, cgroup = read.exe, read.cwd, read.commandline, read.cgroup
    labels = {"__process_pid__": str(pid), "__meta_process_exe": exe, "__meta_process_cwd": cwd,
              "__meta_process_commandline": cmdline}
    if cfg["container_id"]:
        for line in cgroup.splitlines():
            m = _CGROUP_CID.match(line)
            if m:
                labels["__container_id__"] = m.group(1)
                break
    if cfg["cgroup_path"]:
        labels["__meta_process_cgroup_path"] = "|".join(cgroup.splitlines())
    if cfg["username"] or cfg["uid"]:
        ids = procs.credentials(pid)
        uid = ids[0] if ids is not None else -1
        if uid >= 0:
            if cfg["uid"]:
                labels["__meta_process_uid"] = str(uid)
            if cfg["username"]:
                if uid not in users:
                    try:
                        users[uid] = pwd.getpwuid(uid).pw_name
                    except KeyError:
                        users[uid] = ""
                labels["__meta_process_username"] = users[uid]
    return {k: v for k, v in labels.items() if v}


def discover(cfg: dict) -> list[dict[str, str]]:
    users: dict[int, str] = {}
    out = []
    for pid in procs.all_pids():
        t = process_target(pid, cfg, users)
        if t is not None:
            out.append(t)
    return out


def join(processes: list[dict[str, str]], external: list[dict[str, str]]) -> list[dict[str, str]]:
    """Merge each process with the external targets of its container (their labels win)."""
    by_cid: dict[str, list[dict[str, str]]] = {}
    without_cid = []
    for t in external:
        cid = container_id_of_target(t, swarm=False)
        if cid:
            by_cid.setdefault(cid, []).append(t)
        else:
            without_cid.append(t)
    out = []
    for p in processes:
        matches = by_cid.get(p.get("__container_id__", ""), [])
        if matches:
            out.extend({**p, **m} for m in matches)
        else:
            out.append(p)
    out.extend(without_cid)
    out.extend(t for ts in by_cid.values() for t in ts)
    return out


@register
class DiscoveryProcess(Component):
    name = "discovery.process"
    schema = Schema([Arg("join", TARGETS, None), Arg("refresh_interval", DURATION, 60.0),
                     BlockArg("discover_config", DISCOVER_CONFIG)])
    initial_exports = {"targets": []}

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._processes: list[dict[str, str]] = []

    def update(self, args: dict) -> None:
        if args["refresh_interval"] <= 0:
            raise ValueError("refresh_interval must be greater than 0")
        self.args = args
        if self._thread is not None:
            self._wake.set()

    def refresh(self) -> None:
        args = self.args
        self._processes = discover(args["discover_config"])
        self.publish(targets=join(self._processes, args["join"] or []))

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name=f"hotstack-{self.id}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.args["refresh_interval"])
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh()
                self.set_health("healthy", f"{len(self.exports['targets'])} targets")
            except Exception as e:  # keep the last good targets
                self.set_health("unhealthy", f"refresh failed: {e}")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def debug_info(self) -> dict:
        return {"processes": len(self._processes), "targets": len(self.exports["targets"])}
