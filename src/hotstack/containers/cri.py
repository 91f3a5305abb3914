"""The Kubernetes Container Runtime Interface (containerd, CRI-O): a container's name, image,
pid and labels from RuntimeService.ContainerStatus over gRPC on the runtime's unix socket.

Messages and field numbers as published in k8s.io/cri-api (runtime.v1), declared here for the
fields we read (protodesc.py).
"""

from __future__ import annotations

import json
import os

import grpc

from . import protodesc
from .model import ContainerMetadata, RuntimeUnavailable

# Where the runtimes listen by default (kubelet's --container-runtime-endpoint).
DEFAULT_SOCKETS = ("/run/containerd/containerd.sock", "/var/run/crio/crio.sock")
SERVICE = "/runtime.v1.RuntimeService/"

MESSAGES = protodesc.build("runtime.v1", "hotstack/cri_runtime_v1_status.proto", {
    "VersionRequest": [("version", 1, "string")],
    "VersionResponse": [("version", 1, "string"), ("runtime_name", 2, "string"), ("runtime_version", 3, "string"),
                        ("runtime_api_version", 4, "string")],
    "ContainerMetadata": [("name", 1, "string"), ("attempt", 2, "uint32")],
    "ImageSpec": [("image", 1, "string"), ("annotations", 2, "map<string,string>")],
    "ContainerStatusRequest": [("container_id", 1, "string"), ("verbose", 2, "bool")],
    "ContainerStatus": [("id", 1, "string"), ("metadata", 2, "ContainerMetadata"), ("state", 3, "ContainerState"),
                        ("created_at", 4, "int64"), ("started_at", 5, "int64"), ("image", 8, "ImageSpec"),
                        ("image_ref", 9, "string"), ("labels", 12, "map<string,string>"),
                        ("annotations", 13, "map<string,string>")],
    "ContainerStatusResponse": [("status", 1, "ContainerStatus"), ("info", 2, "map<string,string>")],
}, enums={"ContainerState": {"CONTAINER_CREATED": 0, "CONTAINER_RUNNING": 1, "CONTAINER_EXITED": 2,
                             "CONTAINER_UNKNOWN": 3}})


def _iso(ns: int) -> str:
    if not ns:
        return ""
    import datetime
    t = datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ns % 1_000_000_000:09d}Z"


class CRIRuntime:
    """One CRI endpoint; its runtime name (containerd, cri-o) comes from Version."""

    def __init__(self, socket_path: str, timeout: float = 2.0) -> None:
        self.socket_path = self.endpoint = socket_path
        self.timeout = timeout
        self.name = "cri"
        self._channel: grpc.Channel | None = None

    def _call(self, method: str, request, response_type):
        if not os.path.exists(self.socket_path):
            raise RuntimeUnavailable(f"no CRI socket at {self.socket_path}")
        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        rpc = self._channel.unary_unary(SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_type.FromString)
        return rpc(request, timeout=self.timeout)

    def version(self) -> str:
        try:
            v = self._call("Version", MESSAGES["VersionRequest"](version="v1"), MESSAGES["VersionResponse"])
        except grpc.RpcError as e:
            raise RuntimeUnavailable(f"CRI at {self.socket_path}: {e.code().name}: {e.details()}") from None
        self.name = v.runtime_name or "cri"
        return v.runtime_version

    def inspect(self, container_id: str) -> ContainerMetadata | None:
        if self.name == "cri":
            self.version()
        request = MESSAGES["ContainerStatusRequest"](container_id=container_id, verbose=True)
        try:
            answer = self._call("ContainerStatus", request, MESSAGES["ContainerStatusResponse"])
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise RuntimeUnavailable(f"CRI at {self.socket_path}: {e.code().name}: {e.details()}") from None
        s = answer.status
        pid = 0
        try:   # verbose info: {"info": "{\"pid\": 1234, ...}"} (containerd and CRI-O)
            pid = int(json.loads(answer.info.get("info", "{}")).get("pid") or 0)
        except (ValueError, TypeError, AttributeError):
            pass
        return ContainerMetadata(container_id=s.id or container_id, name=s.metadata.name, runtime=self.name,
                                 image=s.image.image, pid=pid, started_at=_iso(s.started_at), labels=dict(s.labels))

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
