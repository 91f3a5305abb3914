"""A real containerd with its CRI plugin on, for tests: Debian's containerd started with its own
root, state and socket under a temporary directory (no CNI: pods use the node's network),
images imported from OCI archives made here (no registry is reachable), and pods and
containers made over the CRI as kubelet makes them. Stopped by its pid."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import grpc

from hotstack.containers import protodesc

from .docker_engine import terminate

_MESSAGES = protodesc.build("runtime.v1", "tests/cri_runtime_v1_pods.proto", {
    "PodSandboxMetadata": [("name", 1, "string"), ("uid", 2, "string"), ("namespace", 3, "string"),
                           ("attempt", 4, "uint32")],
    "NamespaceOption": [("network", 1, "NamespaceMode"), ("pid", 2, "NamespaceMode"), ("ipc", 3, "NamespaceMode")],
    "LinuxSandboxSecurityContext": [("namespace_options", 1, "NamespaceOption")],
    "LinuxPodSandboxConfig": [("cgroup_parent", 1, "string"), ("security_context", 2, "LinuxSandboxSecurityContext")],
    "PodSandboxConfig": [("metadata", 1, "PodSandboxMetadata"), ("hostname", 2, "string"),
                         ("log_directory", 3, "string"), ("labels", 6, "map<string,string>"),
                         ("annotations", 7, "map<string,string>"), ("linux", 8, "LinuxPodSandboxConfig")],
    "RunPodSandboxRequest": [("config", 1, "PodSandboxConfig"), ("runtime_handler", 2, "string")],
    "RunPodSandboxResponse": [("pod_sandbox_id", 1, "string")],
    "StopPodSandboxRequest": [("pod_sandbox_id", 1, "string")],
    "RemovePodSandboxRequest": [("pod_sandbox_id", 1, "string")],
    "Empty": [],
    "ContainerMetadata": [("name", 1, "string"), ("attempt", 2, "uint32")],
    "ImageSpec": [("image", 1, "string")],
    "ContainerConfig": [("metadata", 1, "ContainerMetadata"), ("image", 2, "ImageSpec"),
                        ("command", 3, "repeated string"), ("args", 4, "repeated string"),
                        ("labels", 9, "map<string,string>"), ("annotations", 10, "map<string,string>"),
                        ("log_path", 11, "string")],
    "CreateContainerRequest": [("pod_sandbox_id", 1, "string"), ("config", 2, "ContainerConfig"),
                               ("sandbox_config", 3, "PodSandboxConfig")],
    "CreateContainerResponse": [("container_id", 1, "string")],
    "StartContainerRequest": [("container_id", 1, "string")],
}, enums={"NamespaceMode": {"POD": 0, "CONTAINER": 1, "NODE": 2, "TARGET": 3}})


def containerd_path() -> str | None:
    return shutil.which("containerd")


def oci_archive(path: Path, name: str, files: dict[str, Path], cmd: list[str]) -> Path:
    """An OCI image archive (oci-layout, index.json, blobs) whose one layer holds `files`."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w") as t:
        for inside, host in files.items():
            t.add(str(host), arcname=inside.lstrip("/"))
    layer = layer_buf.getvalue()
    digest = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()  # noqa: E731
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": cmd},
                         "rootfs": {"type": "layers", "diff_ids": [digest(layer)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                       "digest": digest(layer), "size": len(layer)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest(manifest),
        "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                        "io.containerd.image.name": name}}]}).encode()
    with tarfile.open(path, "w") as t:
        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for blob in (layer, config, manifest):
            add("blobs/sha256/" + digest(blob)[len("sha256:"):], blob)
    return path


class Containerd:
    def __init__(self, root: Path, pause_image: str) -> None:
        self.root = root
        self.socket = str(root / "containerd.sock")
        for d in ("root", "state", "opt", "cni-bin", "cni-conf", "logs"):
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / "config.toml").write_text(f'''version = 2
root = "{root}/root"
state = "{root}/state"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  stream_server_address = "127.0.0.1"
  # no lower oom_score_adj than containerd's own (this machine may not grant CAP_SYS_RESOURCE)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{root}/cni-bin"
    conf_dir = "{root}/cni-conf"
''')
        self.log = root / "containerd.log"
        self._logf = open(self.log, "w")
        self.proc = subprocess.Popen([containerd_path(), "--log-level", os.environ.get("HOTSTACK_CONTAINERD_LOG", "info"), "--config", str(root / "config.toml")],
                                     stdout=self._logf, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"containerd did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.2)
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        self.sandboxes: list[str] = []
        self.cgroup_parents: set[str] = set()

    def ctr(self, *args: str) -> str:
        r = subprocess.run(["ctr", "--address", self.socket, "--namespace", "k8s.io", *args],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", str(archive))

    def _call(self, method: str, request, response: str = "Empty"):
        rpc = self.channel.unary_unary(f"/runtime.v1.RuntimeService/{method}",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=_MESSAGES[response].FromString)
        return rpc(request, timeout=60)

    def run_pod(self, namespace: str, pod: str, uid: str, container: str, image: str, command: list[str],
                cgroup_parent: str) -> str:
        """A pod sandbox on the node's network and one container in it, labelled as kubelet does;
        the container id."""
        M = _MESSAGES
        self.cgroup_parents.add(cgroup_parent)
        sandbox_config = M["PodSandboxConfig"](
            metadata=M["PodSandboxMetadata"](name=pod, uid=uid, namespace=namespace),
            log_directory=str(self.root / "logs"),
            labels={"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": namespace,
                    "io.kubernetes.pod.uid": uid},
            linux=M["LinuxPodSandboxConfig"](cgroup_parent=cgroup_parent, security_context=M[
                "LinuxSandboxSecurityContext"](namespace_options=M["NamespaceOption"](network=2, pid=1, ipc=0))))
        sandbox = self._call("RunPodSandbox", M["RunPodSandboxRequest"](config=sandbox_config),
                             "RunPodSandboxResponse").pod_sandbox_id
        self.sandboxes.append(sandbox)
        config = M["ContainerConfig"](
            metadata=M["ContainerMetadata"](name=container), image=M["ImageSpec"](image=image), command=command,
            log_path=f"{container}.log",
            labels={"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": namespace,
                    "io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": container})
        cid = self._call("CreateContainer", M["CreateContainerRequest"](
            pod_sandbox_id=sandbox, config=config, sandbox_config=sandbox_config), "CreateContainerResponse").container_id
        self._call("StartContainer", M["StartContainerRequest"](container_id=cid))
        return cid

    def remove_pods(self) -> None:
        for sandbox in self.sandboxes:
            try:
                self._call("StopPodSandbox", _MESSAGES["StopPodSandboxRequest"](pod_sandbox_id=sandbox))
                self._call("RemovePodSandbox", _MESSAGES["RemovePodSandboxRequest"](pod_sandbox_id=sandbox))
            except grpc.RpcError:
                pass
        self.sandboxes.clear()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.remove_pods()
            if hasattr(self, "channel"):
                self.channel.close()
            terminate(self.proc)
        self._logf.close()
        for d in ("state", "root"):
            subprocess.run(["umount", "-R", str(self.root / d)], capture_output=True)
        for d in ("root", "state", "opt"):
            shutil.rmtree(self.root / d, ignore_errors=True)
        for parent in self.cgroup_parents:   # runc made the parent cgroup in each hierarchy
            for hierarchy in Path("/sys/fs/cgroup").iterdir():
                try:
                    (hierarchy / parent.lstrip("/")).rmdir()
                except OSError:
                    pass
