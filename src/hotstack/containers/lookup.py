"""Ask each runtime in turn which container an id is; remember the answers for a while."""

from __future__ import annotations

import threading
import time
from typing import Protocol

import os

from .cri import DEFAULT_SOCKETS as CRI_SOCKETS
from .cri import CRIRuntime
from .docker import DockerRuntime, socket_from_env
from .model import ContainerMetadata, RuntimeUnavailable

FOUND_TTL_S = 300.0     # names of a container do not change while it runs
MISSING_TTL_S = 10.0    # an unknown id (a container starting, a runtime down) is asked again soon


class Runtime(Protocol):
    name: str
    endpoint: str

    def inspect(self, container_id: str) -> ContainerMetadata | None: ...


class ContainerRuntimes:
    """The runtimes of this host, asked in order; the first that knows the id answers."""

    def __init__(self, runtimes: list[Runtime], clock=time.monotonic) -> None:
        self.runtimes = runtimes
        self._clock = clock
        self._cache: dict[str, tuple[float, ContainerMetadata | None]] = {}
        self._lock = threading.Lock()
        self.errors: dict[str, str] = {}   # runtime endpoint -> last reason it could not be asked

    def container_metadata(self, container_id: str) -> ContainerMetadata | None:
        if not container_id:
            return None
        now = self._clock()
        with self._lock:
            hit = self._cache.get(container_id)
            if hit is not None and hit[0] > now:
                return hit[1]
        found = None
        for runtime in self.runtimes:
            try:
                found = runtime.inspect(container_id)
            except RuntimeUnavailable as e:
                self.errors[runtime.endpoint] = str(e)
                continue
            self.errors.pop(runtime.endpoint, None)
            if found is not None:
                break
        with self._lock:
            if len(self._cache) > 10000:   # bounded: drop what has expired
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache[container_id] = (now + (FOUND_TTL_S if found else MISSING_TTL_S), found)
        return found


def cri_sockets_from_env() -> list[str]:
    """$CONTAINER_RUNTIME_ENDPOINT (as crictl reads it) or the runtimes' usual sockets."""
    endpoint = os.environ.get("CONTAINER_RUNTIME_ENDPOINT", "")
    if endpoint:
        return [endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint]
    return list(CRI_SOCKETS)


def default_runtimes() -> ContainerRuntimes:
    """Docker ($DOCKER_HOST or /var/run/docker.sock), then the CRI endpoints (containerd, CRI-O);
    a runtime that is not there is skipped at each lookup."""
    return ContainerRuntimes([DockerRuntime(socket_from_env()), *(CRIRuntime(s) for s in cri_sockets_from_env())])


# ig's -r/--runtimes names -> how each is asked. Podman answers on its Docker-compatible API.
RUNTIME_NAMES = ("docker", "containerd", "cri-o", "podman")
PODMAN_SOCKET = "/run/podman/podman.sock"


def named_runtimes(names: list[str]) -> ContainerRuntimes:
    """Only these runtimes (ig's -r/--runtimes), in this order: docker ($DOCKER_HOST or its socket),
    containerd and cri-o ($CONTAINER_RUNTIME_ENDPOINT or each one's socket), podman."""
    endpoint = os.environ.get("CONTAINER_RUNTIME_ENDPOINT", "")
    made: list[Runtime] = []
    for name in names:
        if name == "docker":
            made.append(DockerRuntime(socket_from_env()))
        elif name in ("containerd", "cri-o"):
            made.append(CRIRuntime(cri_sockets_from_env()[0] if endpoint else CRI_SOCKETS[name == "cri-o"]))
        elif name == "podman":
            made.append(DockerRuntime(PODMAN_SOCKET))
        else:
            raise ValueError(name)
    return ContainerRuntimes(made)


_default: ContainerRuntimes | None = None
_default_lock = threading.Lock()


def use_runtimes(runtimes: ContainerRuntimes) -> None:
    """The runtimes container_metadata asks from now on (ig's -r/--runtimes)."""
    global _default
    with _default_lock:
        _default = runtimes


def container_metadata(container_id: str) -> ContainerMetadata | None:
    """The metadata of a container id from this host's runtimes (shared, cached)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = default_runtimes()
    return _default.container_metadata(container_id)
