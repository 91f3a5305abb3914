"""The Docker Engine: a container's name, image, pid and labels from GET /containers/ID/json."""

from __future__ import annotations

import os
import urllib.parse

from .model import ContainerMetadata, RuntimeUnavailable
from .unix_http import get_json

DEFAULT_SOCKET = "/var/run/docker.sock"
API = "/v1.41"   # served by every Docker Engine since 20.10


def socket_from_env() -> str:
    """DOCKER_HOST when it names a unix socket (as the docker CLI reads it), else the default."""
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://"):]
    return DEFAULT_SOCKET


class DockerRuntime:
    name = "docker"

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = self.endpoint = socket_path
        self.timeout = timeout

    def available(self) -> bool:
        return os.path.exists(self.socket_path)

    def inspect(self, container_id: str) -> ContainerMetadata | None:
        """The container's metadata, None if this engine does not know it."""
        if not self.available():
            raise RuntimeUnavailable(f"no Docker socket at {self.socket_path}")
        try:
            status, c = get_json(self.socket_path, f"{API}/containers/{urllib.parse.quote(container_id)}/json",
                                 self.timeout)
        except OSError as e:
            raise RuntimeUnavailable(f"Docker at {self.socket_path}: {e.strerror or e}") from None
        if status == 404 or not isinstance(c, dict):
            return None
        if status != 200:
            raise RuntimeUnavailable(f"Docker at {self.socket_path}: HTTP {status}")
        config, state = c.get("Config") or {}, c.get("State") or {}
        return ContainerMetadata(container_id=c.get("Id", container_id), name=(c.get("Name") or "").lstrip("/"),
                                 runtime=self.name, image=config.get("Image", ""), pid=int(state.get("Pid") or 0),
                                 started_at=state.get("StartedAt", ""), labels=dict(config.get("Labels") or {}))
