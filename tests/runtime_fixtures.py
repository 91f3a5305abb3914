"""Real container runtimes for any test (imported by tests/conftest.py): a Docker Engine and a
containerd with its CRI plugin (tests/docker_engine.py, tests/containerd_cri.py), started once per
session, and images of the known static workload (tests/alloy/workloads/spin.c: it spins, or with
the argument `idle` it pauses, which also makes it the pods' pause image)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import compile_c
from .containerd_cri import Containerd, containerd_path, oci_archive
from .docker_engine import DockerEngine, dockerd_path

SPIN_SOURCE = Path(__file__).resolve().parent / "alloy" / "workloads" / "spin.c"
SPIN_IMAGE = "hotstack-test/spin:1"
PAUSE_IMAGE = "docker.io/hotstack-test/pause:1"
CRI_SPIN_IMAGE = "docker.io/hotstack-test/spin:1"


def _need(found: str | None, what: str) -> None:
    if found is None:
        pytest.fail(f"{what} is not installed: run `sudo bash .ci/install.d/parity.sh` (Debian's docker.io)")


@pytest.fixture(scope="session")
def static_spin(build_dir) -> Path:
    """The spin workload linked statically: a container's filesystem needs nothing else."""
    return compile_c(SPIN_SOURCE, build_dir / "spin-static", "-static", "-O1", "-g", "-fno-omit-frame-pointer")


@pytest.fixture(scope="session")
def _docker_engine_session(tmp_path_factory):
    _need(dockerd_path(), "dockerd")
    engine = DockerEngine(tmp_path_factory.mktemp("dockerd"))
    yield engine
    engine.stop()


@pytest.fixture
def docker_engine(_docker_engine_session):
    """The session's engine; the containers a test starts are removed after it."""
    yield _docker_engine_session
    _docker_engine_session.remove_containers()


@pytest.fixture(scope="session")
def spin_image(_docker_engine_session, static_spin) -> str:
    """A Docker image whose root filesystem is /spin alone."""
    return _docker_engine_session.import_image(SPIN_IMAGE, {"/spin": static_spin})


@pytest.fixture
def containerd_cri(_containerd_session):
    """The session's containerd; the pods a test makes are removed after it."""
    yield _containerd_session
    _containerd_session.remove_pods()


@pytest.fixture(scope="session")
def _containerd_session(tmp_path_factory, static_spin):
    """containerd with its CRI plugin, the pause and spin images imported."""
    _need(containerd_path(), "containerd")
    root = tmp_path_factory.mktemp("containerd")
    c = Containerd(root, PAUSE_IMAGE)
    try:
        c.import_image(oci_archive(root / "pause.tar", PAUSE_IMAGE, {"/spin": static_spin}, ["/spin", "idle"]))
        c.import_image(oci_archive(root / "spin.tar", CRI_SPIN_IMAGE, {"/spin": static_spin}, ["/spin"]))
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()


def runtime_source(engine, name: str):
    """The engine's frame source of runtime `name`, built (a deferred one is built at the first
    process of its runtime; a test that looks into it builds it now)."""
    from hotstack.runtimes.registry import DeferredSource
    source = next(s for s in engine.runtimes if s.name == name)
    return source.build() if isinstance(source, DeferredSource) else source
