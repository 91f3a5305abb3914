"""The otel-profiles operator: an annotated datasource's samples -> OTLP profiles, one export per fetch.

It reads only annotations, so it serves any datasource that carries them:
- datasource `profiles.stack-fields` (comma-separated, concatenated in order, leaf first),
  `profiles.value-field`, `profiles.type` / `profiles.unit` (sample type, default samples/count),
  `profiles.name` (period type, as Inspektor Gadget), and hotstack's `profiles.period-type`,
  `profiles.period-unit`, `profiles.period`, which win over `profiles.name`/`profiles.unit` for the
  period (profile_cpu sets cpu/nanoseconds and 1e9/Hz so that receivers name it `process_cpu`);
- field `profiles.sample-attribute: "true"`: the field becomes a sample attribute, named by the
  full field name (dots kept) or, with `--otel-profiles-sanitize-labels`, dots replaced by '_'.

The gadget hands it the interval's Profile: each field is filled from a sample as the datasource
says (Field.of), and a stack field gives its frames (Field.frames) with their mapping, address and
build id. Rows of any other datasource (text stacks "a; b; c") are read the same way.

Differences from Inspektor Gadget, on purpose: empty frames (from a trailing "; ") are dropped
instead of becoming location 0; stacks are deduplicated; structured frames are used when the
datasource gives them; empty attribute values are left out (unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Sequence

from .. import __version__
from ..errors import ConfigError
from ..export.otlp_grpc import OtlpProfilesExporter
from ..profile.model import Frame, Profile, Sample, ValueType
from ..profile.otlp import OtlpOptions, all_labels, encode_profile
from .datasource import DataSource
from .datasource import Row as DataRow

STACK_SEPARATOR = "; "
INT_KINDS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True)
class AttributeField:
    field: str       # field name in the datasource
    name: str        # attribute name on the wire
    kind: str


def sanitize_label(name: str) -> str:
    return name.replace(".", "_")


def attribute_fields(ds: DataSource, sanitize: bool) -> list[AttributeField]:
    """Fields marked `profiles.sample-attribute`, with their attribute names; fails on a collision."""
    chosen: dict[str, AttributeField] = {}
    for f in ds.fields:
        if f.annotations.get("profiles.sample-attribute", "").lower() != "true":
            continue
        name = sanitize_label(f.name) if sanitize else f.name
        other = chosen.get(name)
        if other is not None:
            raise ConfigError(
                f"--otel-profiles-sanitize-labels: fields {other.field!r} and {f.name!r} of datasource {ds.name!r} "
                f"both become the sample attribute {name!r}; mark only one with profiles.sample-attribute "
                f"(e.g. --annotate {ds.name}.{f.name}:profiles.sample-attribute=false)")
        chosen[name] = AttributeField(f.name, name, f.kind)
    return list(chosen.values())


class OtelProfilesOperator:
    def __init__(self, ds: DataSource, exporters: Sequence[OtlpProfilesExporter], *, sanitize: bool = False) -> None:
        ann = ds.annotations
        self.ds = ds
        self.datasource = ds.name
        self.exporters = list(exporters)
        self.stack_fields = [s.strip() for s in ann.get("profiles.stack-fields", "").split(",") if s.strip()]
        self.value_field = ann.get("profiles.value-field", "").strip()
        if not self.stack_fields or not self.value_field:
            missing = "profiles.stack-fields" if not self.stack_fields else "profiles.value-field"
            raise ConfigError(f"--otel-profiles-exporter: datasource {ds.name!r} has no {missing} annotation, "
                              f"so it has no profile to export (add it with --annotate {ds.name}:{missing}=FIELD)")
        for name in (*self.stack_fields, self.value_field):
            if not ds.has_field(name):
                raise ConfigError(f"--otel-profiles-exporter: datasource {ds.name!r} has no field {name!r} "
                                  f"(named by its profiles.* annotations)")
        # fields as the datasource names them (an annotation may use an older alias)
        self.stack_fields = [ds.field(n).name for n in self.stack_fields]
        self.value_field = ds.field(self.value_field).name
        if ds.field(self.value_field).kind not in INT_KINDS:
            raise ConfigError(f"--otel-profiles-exporter: profiles.value-field {self.value_field!r} is a "
                              f"{ds.field(self.value_field).kind}, not an integer")
        unit = ann.get("profiles.unit", "count")
        self.sample_type = ValueType(ann.get("profiles.type", "samples"), unit)
        self.period_type = ValueType(ann.get("profiles.period-type") or ann.get("profiles.name") or ds.name,
                                     ann.get("profiles.period-unit") or unit)
        try:
            self.period = int(ann.get("profiles.period", "1"))
        except ValueError:
            raise ConfigError(f"datasource {ds.name!r}: profiles.period {ann['profiles.period']!r} "
                              f"is not an integer") from None
        self.attributes = attribute_fields(ds, sanitize)

    def samples_from_rows(self, data: Sequence[DataRow]) -> list[Sample]:
        """Samples of rows of any datasource with these annotations (text stacks)."""
        return self._samples(data, lambda row, name: row.get(name),
                             lambda row, name: text_frames(row.get(name)))

    def samples_from_profile(self, profile: Profile) -> list[Sample]:
        """Samples of the gadget's Profile, each field filled as the datasource says."""
        fields = {f.name: f for f in self.ds.fields}

        def get(sample: Sample, name: str):
            f = fields[name]
            return f.of(sample) if f.of is not None else None

        def frames(sample: Sample, name: str):
            f = fields[name]
            return f.frames(sample) if f.frames is not None else text_frames(get(sample, name))
        return self._samples(profile.samples, get, frames)

    def _samples(self, items, get: Callable[[Any, str], Any], frames_of: Callable[[Any, str], Sequence[Frame]]):
        out: list[Sample] = []
        for item in items:
            value = int(get(item, self.value_field) or 0)
            if value <= 0:
                continue
            frames: list[Frame] = []
            for name in self.stack_fields:
                frames.extend(frames_of(item, name))
            attrs = []
            for a in self.attributes:
                v = attribute_value(get(item, a.field), a.kind)
                if v is not None:
                    attrs.append((a.name, v))
            out.append(Sample(tuple(frames), value, 0, 0, "", tuple(attrs)))
        return out

    def export(self, profile: Profile) -> int:
        """One request per exporter for this fetch; nothing for an empty one. Returns the sample count."""
        samples = self.samples_from_profile(profile)
        if not samples:
            return 0
        annotated = Profile(samples, profile.start_ns, profile.duration_ns, profile.frequency_hz, profile.name,
                            self.sample_type, self.period_type)
        options = OtlpOptions(period=self.period, service_name="hotstack", service_version=__version__,
                              scope_name="hotstack", scope_version=__version__, attributes=all_labels)
        for exporter in self.exporters:
            exporter.export(lambda version: encode_profile(annotated, version, options))
        return len(samples)


def text_frames(text) -> list[Frame]:
    """A text stack field, "a; b; c" leaf first, as frames (empty names dropped)."""
    return [Frame(name) for name in (s.strip() for s in str(text or "").split(STACK_SEPARATOR.strip())) if name]


def attribute_value(value: Any, kind: str) -> Any:
    if value is None or value == "":
        return None
    if kind == "bool":
        return bool(value)
    if kind in INT_KINDS:
        return int(value) if int(value) < 2 ** 63 else int(value) - 2 ** 64   # uint64 -> int64, as IG
    if kind in ("float32", "float64"):
        return float(value)
    return str(value)
