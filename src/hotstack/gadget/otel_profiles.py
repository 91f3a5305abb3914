"""The otel-profiles operator: rows of an annotated datasource -> OTLP profiles, one export per fetch.

It reads only annotations, so it serves any datasource that carries them:
- datasource `profiles.stack-fields` (comma-separated, concatenated in order, leaf first),
  `profiles.value-field`, `profiles.type` / `profiles.unit` (sample type, default samples/count),
  `profiles.name` (period type, as Inspektor Gadget), and hotstack's `profiles.period-type`,
  `profiles.period-unit`, `profiles.period`, which win over `profiles.name`/`profiles.unit` for the
  period (profile_cpu sets cpu/nanoseconds and 1e9/Hz so that receivers name it `process_cpu`);
- field `profiles.sample-attribute: "true"`: the field becomes a sample attribute, named by the
  full field name (dots kept) or, with `--otel-profiles-sanitize-labels`, dots replaced by '_'.

Differences from Inspektor Gadget, on purpose: empty frames (from a trailing "; ") are dropped
instead of becoming location 0; stacks are deduplicated; structured frames (mapping, address,
build id) are used when the row carries them; empty attribute values are left out (unknown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .. import __version__
from ..errors import ConfigError
from ..export.otlp_grpc import OtlpProfilesExporter
from ..profile.model import Frame, ValueType
from ..profile.otlp import ProfileHeader, Row, build_request
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

    def rows(self, data: Sequence[DataRow]) -> list[Row]:
        out: list[Row] = []
        for row in data:
            value = int(row.get(self.value_field) or 0)
            if value <= 0:
                continue
            frames: list[Frame] = []
            for name in self.stack_fields:
                frames.extend(stack_frames(row, name))
            attrs = []
            for a in self.attributes:
                v = attribute_value(row.get(a.field), a.kind)
                if v is not None:
                    attrs.append((a.name, v))
            out.append((frames, value, attrs))
        return out

    def export(self, data: Sequence[DataRow], start_ns: int, duration_ns: int) -> int:
        """One request per exporter for this fetch; nothing for an empty one. Returns the row count."""
        rows = self.rows(data)
        if not rows:
            return 0
        header = ProfileHeader(sample_type=self.sample_type, period_type=self.period_type, period=self.period,
                               start_ns=start_ns, duration_ns=duration_ns, service_name="hotstack",
                               service_version=__version__, scope_name="hotstack", scope_version=__version__)

        def encode(version: str) -> bytes:
            return build_request(rows, header, version).SerializeToString()

        for exporter in self.exporters:
            exporter.export(encode)
        return len(rows)


def stack_frames(row: DataRow, field: str) -> list[Frame]:
    """Structured frames when the row has them (`_frames`), else the field's "a; b; c" string."""
    structured = row.get("_frames")
    if structured is not None and field in structured:
        return list(structured[field])
    text = row.get(field) or ""
    return [Frame(name) for name in (s.strip() for s in str(text).split(STACK_SEPARATOR.strip())) if name]


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
