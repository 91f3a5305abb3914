"""The profile_cpu gadget: its datasource `samples`, each field filled from a Sample."""

from __future__ import annotations

import time

from .. import procs
from ..profile.model import Sample
from .datasource import DataSource, Field

STACK_SEPARATOR = "; "


def kernel_frames(sample: Sample) -> list:
    return [f for f in sample.stack if f.is_kernel]


def user_frames(sample: Sample) -> list:
    return [f for f in sample.stack if not f.is_kernel]


def format_stack(frames) -> str:
    """Frames leaf first as `a; b; c` (no trailing separator, so no empty frame)."""
    return STACK_SEPARATOR.join(f.name for f in frames)


def _container(field: str):
    """A runtime.* or k8s.* field of the sample's container, named by its runtime (containers/)."""
    def of(sample: Sample) -> str:
        # Imported at the first row, not at start-up: gRPC and protobuf (the CRI client) cost
        # ~0.1 CPU-s that a run printing a table never needs (bench/startup.py).
        from ..containers import container_metadata

        meta = container_metadata(sample.label("container_id"))
        return meta.fields()[field] if meta is not None else ""
    return of


CREDS_TTL_S = 10.0     # a process's ids are read again after this long (a pid reused, a setuid)
_creds: dict[int, tuple[float, tuple[int, int] | None]] = {}


def _credential(index: int):
    """proc.creds.uid (0) or .gid (1) of the sample's process: its real ids, read from /proc (as
    they are when first asked; ig reads them in its BPF program at the sample). None when the
    process is gone."""
    def of(sample: Sample) -> int | None:
        now = time.monotonic()
        hit = _creds.get(sample.pid)
        if hit is None or hit[0] < now:
            if len(_creds) > 10000:
                _creds.clear()
            hit = _creds[sample.pid] = (now + CREDS_TTL_S, procs.credentials(sample.pid))
        return hit[1][index] if hit[1] is not None else None
    return of


def samples_datasource(sample_rate_hz: int = 49) -> DataSource:
    """The `samples` datasource, annotated as Inspektor Gadget's profile_cpu is.

    Beyond Inspektor Gadget's annotations, the period is CPU time (cpu/nanoseconds, 1e9/Hz) so that
    every receiver names the profile `process_cpu` (Pyroscope maps samples/count + cpu/nanoseconds to
    it in all versions) and can turn counts into time.
    """
    attribute = {"profiles.sample-attribute": "true"}
    return DataSource(
        name="samples",
        annotations={
            "profiles.stack-fields": "kern_stack,user_stack_raw.symbols",
            "profiles.value-field": "samples",
            "profiles.name": "process_cpu",
            "profiles.type": "samples",
            "profiles.unit": "count",
            "profiles.period-type": "cpu",
            "profiles.period-unit": "nanoseconds",
            "profiles.period": str(1_000_000_000 // max(1, sample_rate_hz)),
            "ebpf.map.flush-on-stop": "true",
        },
        fields=[
            Field("runtime.containerName", "string", {"flamegraph.level": "0", **attribute},
                  of=_container("runtime.containerName")),
            Field("runtime.containerId", "string", of=lambda s: s.label("container_id")),
            Field("k8s.namespace", "string", of=_container("k8s.namespace")),
            Field("k8s.podName", "string", of=_container("k8s.podName")),
            Field("k8s.containerName", "string", of=_container("k8s.containerName")),
            Field("proc.comm", "string", {"flamegraph.level": "10", **attribute}, of=lambda s: s.comm),
            Field("proc.pid", "uint32", of=lambda s: s.pid),
            Field("proc.tid", "uint32", of=lambda s: s.tid),
            Field("proc.creds.uid", "uint32", {"columns.hidden": "true"}, of=_credential(0)),
            Field("proc.creds.gid", "uint32", {"columns.hidden": "true"}, of=_credential(1)),
            # ig's name: the symbols of its user_stack_raw struct (hotstack called it user_stack)
            Field("user_stack_raw.symbols", "string", {"flamegraph.level": "20", "flamegraph.type": "stack"},
                  of=lambda s: format_stack(user_frames(s)), frames=user_frames),
            Field("kern_stack", "string", {"flamegraph.level": "30", "flamegraph.type": "stack"},
                  of=lambda s: format_stack(kernel_frames(s)), frames=kernel_frames),
            Field("samples", "uint64", of=lambda s: s.value),
        ],
        aliases={"user_stack": "user_stack_raw.symbols"},
    )
