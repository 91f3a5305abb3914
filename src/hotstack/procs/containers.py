"""Container ids from cgroup paths (docker, containerd, cri-o, kubepods, systemd slices)."""

from __future__ import annotations

import re

# A 64-hex id at the end of a cgroup path segment, with the runtime prefixes that
# systemd and the runtimes add: docker-<id>.scope, cri-containerd-<id>.scope,
# crio-<id>.scope, libpod-<id>.scope, or a bare <id> (cgroupfs driver, kubepods).
_ID = re.compile(r"(?:^|[/-])(?:docker-|cri-containerd-|crio-|libpod-|containerd-)?([0-9a-f]{64})(?:\.scope)?$")


def container_id_from_cgroup(cgroup_text: str) -> str:
    """The container id in a /proc/PID/cgroup text, or '' for a host process."""
    for line in cgroup_text.splitlines():
        path = line.rsplit(":", 1)[-1]
        for segment in reversed(path.split("/")):
            m = _ID.search(segment)
            if m:
                return m.group(1)
    return ""


def strip_runtime_prefix(container_id: str) -> str:
    """`docker://<id>`, `containerd://<id>`, `cri-o://<id>` -> `<id>`."""
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id
