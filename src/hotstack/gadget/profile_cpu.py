"""The profile_cpu gadget: its datasource `samples`, and rows made from a Profile."""

from __future__ import annotations

from collections.abc import Callable

from ..profile.model import Profile, Sample
from .datasource import DataSource, Field, Row

STACK_SEPARATOR = "; "


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
            "profiles.stack-fields": "kern_stack,user_stack",
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
            Field("runtime.containerName", "string", {"flamegraph.level": "0", **attribute}),
            Field("runtime.containerId", "string"),
            Field("k8s.namespace", "string"),
            Field("k8s.podName", "string"),
            Field("k8s.containerName", "string"),
            Field("proc.comm", "string", {"flamegraph.level": "10", **attribute}),
            Field("proc.pid", "uint32"),
            Field("proc.tid", "uint32"),
            Field("user_stack", "string", {"flamegraph.level": "20", "flamegraph.type": "stack"}),
            Field("kern_stack", "string", {"flamegraph.level": "30", "flamegraph.type": "stack"}),
            Field("samples", "uint64"),
        ],
    )


def format_stack(frames) -> str:
    """Frames leaf first as `a; b; c` (no trailing separator, so no empty frame)."""
    return STACK_SEPARATOR.join(f.name for f in frames)


# Container and Kubernetes metadata for a sample: (containerName, namespace, podName, k8s containerName).
Enricher = Callable[[Sample], dict[str, str]]


def rows_from_profile(profile: Profile, enrich: Enricher | None = None) -> list[Row]:
    rows = []
    for sample in profile.samples:
        kernel = [f for f in sample.stack if f.is_kernel]
        user = [f for f in sample.stack if not f.is_kernel]
        row: Row = {
            "runtime.containerName": "",
            "runtime.containerId": sample.label("container_id"),
            "k8s.namespace": "",
            "k8s.podName": "",
            "k8s.containerName": "",
            "proc.comm": sample.comm,
            "proc.pid": sample.pid,
            "proc.tid": sample.tid,
            "user_stack": format_stack(user),
            "kern_stack": format_stack(kernel),
            "samples": sample.value,
        }
        if enrich is not None:
            row.update(enrich(sample))
        row["_sample"] = sample   # structured frames for renderers that want them (never printed)
        row["_frames"] = {"kern_stack": kernel, "user_stack": user}   # the same, per stack field
        rows.append(row)
    return rows
