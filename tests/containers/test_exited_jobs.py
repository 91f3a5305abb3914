"""A container's short job, gone before its interval is collected: its binary exists only in the
container's mount namespace (an image layer), so once the process exits no path of the host opens
it. Its frames are named all the same (issue 47, item 3)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from hotstack.sampling import Engine, EngineConfig

from ..conftest import compile_c

pytestmark = pytest.mark.root

JOB_SOURCE = Path(__file__).resolve().parent.parent / "engine" / "workloads" / "short_job.c"
JOB_IMAGE = "hotstack-test/short-job:1"


@pytest.fixture(scope="module")
def job_image(_docker_engine_session, build_dir) -> str:
    """An image whose root filesystem is /shortjob alone: a static program that spins ~1 s."""
    job = compile_c(JOB_SOURCE, build_dir / "shortjob", "-static", "-O1", "-g", "-fno-omit-frame-pointer")
    return _docker_engine_session.import_image(JOB_IMAGE, {"/shortjob": job})


def _user(sample) -> list:
    return [f for f in sample.stack if f.kind is not FrameKind.KERNEL]


def _named(sample) -> bool:
    """Every user frame named, one of them the job's own function."""
    user = _user(sample)
    return (bool(user) and all(f.resolved for f in user)
            and any(f.name.startswith("short_job_") for f in user))


def test_a_container_job_that_exited_before_the_collect_is_named(docker_engine, job_image):
    with Engine(EngineConfig(frequency=199)) as prof:
        held: dict[int, set] = {}       # pid -> the files held for it (all pids: the job's is not known yet)
        hold = prof.processes.held.hold

        def holding(pid, *args):
            keys = hold(pid, *args)
            held.setdefault(pid, set()).update(keys)
            return keys
        prof.processes.held.hold = holding
        prof.collect()
        # (docker run without -d: returns once the job has exited)
        docker_engine.docker("run", "--network", "none", "--name", "hotstack-short-job", job_image,
                             "/shortjob", "1.0")
        time.sleep(0.3)
        samples = [s for s in prof.collect()[0].samples if s.comm == "shortjob"]
        jobs = {s.pid for s in samples}
        # the job's files were held while it ran, and given back once its samples were named
        assert jobs and all(held.get(pid) for pid in jobs), (jobs, held)
        still = {key for pid in jobs for key in held[pid]} & set(prof.processes.held._files)
        assert not still, still
    total = sum(s.value for s in samples)
    assert total >= 30, total        # ~199 a second for ~1 s, fewer on a loaded machine
    named = sum(s.value for s in samples if _named(s))
    assert named >= 0.9 * total, (named, total, [[f.name for f in s.stack] for s in samples if not _named(s)][:5])
