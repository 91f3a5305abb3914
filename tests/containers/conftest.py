"""A real Docker Engine (tests/docker_engine.py) and an image holding a static spin workload."""

from __future__ import annotations

import pytest

from ..conftest import compile_c
from ..docker_engine import DockerEngine, dockerd_path

SPIN_C = r"""
#include <unistd.h>
volatile unsigned long counter;
__attribute__((noinline)) void hotstack_container_spin(void) { for (int i = 0; i < 2000000; i++) counter += i; }
int main(void) { for (;;) { hotstack_container_spin(); usleep(500); } }
"""


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory):
    if dockerd_path() is None:
        pytest.fail("dockerd is not installed: run `sudo bash .ci/install.d/parity.sh` (Debian's docker.io)")
    engine = DockerEngine(tmp_path_factory.mktemp("dockerd"))
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def spin_image(docker_engine, build_dir) -> str:
    src = build_dir / "container-spin.c"
    src.write_text(SPIN_C)
    binary = compile_c(src, build_dir / "container-spin", "-static", "-O1", "-g", "-fno-omit-frame-pointer")
    return docker_engine.import_image("hotstack-test/spin:1", {"/spin": binary})


PAUSE_C = "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"


@pytest.fixture(scope="session")
def containerd_cri(tmp_path_factory, build_dir):
    """containerd with its CRI plugin, the pause and spin images imported."""
    from ..containerd_cri import Containerd, containerd_path, oci_archive
    if containerd_path() is None:
        pytest.fail("containerd is not installed: run `sudo bash .ci/install.d/parity.sh` (Debian's docker.io)")
    root = tmp_path_factory.mktemp("containerd")
    binaries = {}
    for name, text in (("pause", PAUSE_C), ("spin", SPIN_C)):
        src = build_dir / f"cri-{name}.c"
        src.write_text(text)
        binaries[name] = compile_c(src, build_dir / f"cri-{name}", "-static", "-O1", "-g")
    c = Containerd(root, "docker.io/hotstack-test/pause:1")
    try:
        for name in ("pause", "spin"):
            c.import_image(oci_archive(root / f"{name}.tar", f"docker.io/hotstack-test/{name}:1",
                                       {f"/{name}": binaries[name]}, [f"/{name}"]))
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


# The agent and Pyroscope peers of tests/alloy, for the end-to-end tests against a real engine.
from ..alloy.conftest import agent, pyroscope  # noqa: E402,F401
