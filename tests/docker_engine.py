"""A real Docker Engine for tests: Debian's dockerd, started with its own data-root, exec-root,
pidfile and socket under a temporary directory, making no networks (--bridge=none, no
iptables), so it touches nothing of the host. No registry is reachable: images are made with
`docker import` of a small root filesystem (a static workload), containers run with
--network none. Stopped by its pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path

from hotstack.containers.unix_http import get_json


def terminate(proc: subprocess.Popen, grace_s: float = 60) -> None:
    """Stop a daemon this test started, by its pid: SIGTERM, then SIGKILL after the grace time."""
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def dockerd_path() -> str | None:
    return shutil.which("dockerd")


class DockerEngine:
    def __init__(self, root: Path, own_network_namespace: bool = False) -> None:
        """`own_network_namespace`: dockerd in a network namespace of its own (loopback only),
        for what creates interfaces (Swarm mode's bridge and ingress): none of them on the host's."""
        self.root = root
        self.socket = str(root / "docker.sock")
        self.host = f"unix://{self.socket}"
        self.log = root / "dockerd.log"
        for d in ("data", "exec"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self._logf = open(self.log, "w")
        prefix = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] \
            if own_network_namespace else []
        self.proc = subprocess.Popen(
            [*prefix, dockerd_path(), "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip6tables=false",
             "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
             "--pidfile", str(root / "docker.pid"), "-H", self.host],
            stdout=self._logf, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited: {self.log.read_text()[-2000:]}")
            try:
                if get_json(self.socket, "/_ping")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"dockerd did not answer: {self.log.read_text()[-2000:]}")

    def docker(self, *args: str, timeout: float = 120) -> str:
        r = subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout.strip()

    def import_image(self, name: str, files: dict[str, Path]) -> str:
        """An image whose root filesystem holds exactly `files` (path in image -> host file)."""
        tar = self.root / f"{name.replace(':', '_').replace('/', '_')}.tar"
        with tarfile.open(tar, "w") as t:
            for inside, host in files.items():
                t.add(str(host), arcname=inside.lstrip("/"))
        self.docker("import", str(tar), name)
        return name

    def run(self, image: str, name: str, argv: list[str], labels: dict[str, str] | None = None) -> str:
        """Start a container (no network); its full id."""
        label_args = [a for k, v in (labels or {}).items() for a in ("--label", f"{k}={v}")]
        return self.docker("run", "-d", "--network", "none", "--name", name, *label_args, image, *argv)

    def inspect(self, container: str) -> dict:
        return json.loads(self.docker("inspect", container))[0]

    def pid(self, container: str) -> int:
        return int(self.inspect(container)["State"]["Pid"])

    def remove_containers(self) -> None:
        try:
            ids = self.docker("ps", "-aq", timeout=30).split()
            if ids:
                self.docker("rm", "-f", *ids, timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass

    def _mounts_under_root(self) -> list[str]:
        """Mount points below the engine's directory, deepest first."""
        root = str(self.root) + "/"
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        return sorted((p for p in points if p.startswith(root)), key=len, reverse=True)

    def stop(self, keep_images: bool = False) -> None:
        """Stop dockerd and remove its state; `keep_images`: leave its data root (the images) for the
        next engine on the same root (the runtime matrix caches its imported images so)."""
        if self.proc.poll() is None:
            self.remove_containers()
            terminate(self.proc)
        self._logf.close()
        # dockerd unmounts its layers on shutdown; remove what is left of its state (Swarm mode leaves
        # its sandboxes' network namespaces bound under exec/netns)
        subprocess.run(["umount", "-R", str(self.root / "exec")], capture_output=True)
        for mount in self._mounts_under_root():
            subprocess.run(["umount", mount], capture_output=True)
        if not keep_images:
            shutil.rmtree(self.root / "data", ignore_errors=True)
        shutil.rmtree(self.root / "exec", ignore_errors=True)
