"""Which processes `hotstack run` profiles: as `ig run`, processes in containers unless `--host`.

`ig run GADGET` without `--host` fills its gadget's mount-namespace filter map with the mount
namespaces of the containers its container collection knows (pkg/operators/localmanager:
`CreateMountNsMap`). That collection lists containers from the host's container runtimes
(Docker, containerd, CRI-O, Podman); `--host` creates no map, so nothing is filtered. hotstack
decides the same way per process: a process is in a container when

- its mount namespace is not the host's (pid 1's, the one localmanager reads as the host's), and
- its cgroup names a container id (procs/containers.py) that one of this host's runtimes knows
  (containers/: the Docker Engine, containerd and CRI-O through CRI),
- or it shares the mount namespace of such a process (`nsenter -m -t PID` from the host: ig keys
  containers by mount namespace, so it counts it too).

So a process that only has a mount namespace of its own (`unshare -m`), or a cgroup that merely
looks like a container's, is a host process, as for `ig`.

Explicit selections and the scope (the reasons are in the README too):

- `--pid PID`: the named pids are in scope, host ones too. `ig` has no `--pid` for this; a user
  who names a host pid wants that process, and an empty result would only puzzle them. The
  kernel already keeps only those pids, so no scope filter runs at all.
- `--comm NAME`: narrows within the scope, as `ig`'s in-kernel `--comm` does within its mount
  namespace filter (a host `nginx` needs `--host`).
- `-c/--containername`, `-n/--k8s-namespace`, `--k8s-podname`, `--k8s-containername`: select
  containers, so within the default scope they narrow it; with `--host`, `-c a` still keeps
  container a only and `-c '!a'` keeps the host and every other container.
- `--include-idle`: idle CPUs' samples (pid 0) are counted when asked for, whatever the scope.

The filter runs at the engine's earliest userspace point (`Engine.set_target_filter`): a
declined process gets no symbols and no runtime frames, its samples are only counted
(`ProfileStats.out_of_scope`). The kernel still samples every process: a kernel-side mount
namespace filter would need a map in the BPF programs (as ig's `gadget_mntns_filter_map`).
"""

from __future__ import annotations

import threading

from .. import procs
from ..procs import ProcessTable
from ..profile.model import amount_text

HOST_PID = 1


class ContainerScope:
    """`wants(pid)`: whether a process is in a container known to this host's runtimes."""

    def __init__(self, processes: ProcessTable, known=None, host_mntns: int | None = None) -> None:
        self.processes = processes
        self._known = known          # container id -> metadata or None (default: containers/)
        self.host_mntns = procs.mount_namespace(HOST_PID) if host_mntns is None else host_mntns
        # Decisions that cannot change while the process runs its image: by the Process read.
        self._decided: dict[int, tuple[object, bool]] = {}
        self._container_mntns: set[int] = set()   # mount namespaces of processes found in containers
        self._lock = threading.Lock()

    def known(self, container_id: str) -> bool:
        if self._known is None:
            # Imported at the first container id met: gRPC and protobuf (the CRI client) cost
            # ~0.1 CPU-s that a host without containers never needs (bench/startup.py).
            from ..containers import container_metadata
            self._known = container_metadata
        return self._known(container_id) is not None

    def wants(self, pid: int) -> bool:
        info = self.processes.get(pid)
        if info is None:
            return False              # gone before it was read: nothing tells it is a container's
        with self._lock:
            hit = self._decided.get(pid)
        if hit is not None and hit[0] is info:
            return hit[1]
        if not info.mntns or info.mntns == self.host_mntns:
            decided, keep = True, False      # a host process, for as long as it runs this image
        elif not info.container_id:
            # joined a container's mount namespace without its cgroup, or a namespace of its own
            # (unshare -m); a container seen later may still claim the namespace: not cached
            keep = info.mntns in self._container_mntns
            decided = keep
        else:
            keep = self.known(info.container_id)
            # A runtime that does not know the id yet (a container starting, a runtime down) is
            # asked again later; its answers are cached by containers/.
            decided = keep
        if keep:
            self._container_mntns.add(info.mntns)
        if decided:
            with self._lock:
                if len(self._decided) > 65536:
                    self._decided.clear()
                self._decided[pid] = (info, keep)
        return keep


def hint(profile) -> str:
    """The one line a default run prints when no container process was sampled."""
    left_out = amount_text(profile.stats.out_of_scope, profile.sample_type)
    return (f"hotstack: no container process was sampled ({left_out} of host processes left out): "
            f"without --host, hotstack run profiles only processes in containers, as ig does; "
            f"add --host to profile the host too")
