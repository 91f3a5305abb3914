"""A Profile -> one OTLP `ExportProfilesServiceRequest`, in the wire layout asked for.

One request carries one Profile (one interval) of one resource and scope. Everything a sample
points to lives in the request's dictionary, each table deduplicated and starting with its zero
entry at index 0 (as every layout since v1.7 demands): strings, mappings, functions, locations,
stacks, attributes and links (a sample's OBI trace/span). Rows whose stack and attributes are the same
become one sample with their values summed, since that pair is a sample's identity.

Frames keep what we know of them: each location has its mapping (file, with the GNU build id as a
mapping attribute), its address in the file, the frame type as a location attribute and one line
naming the function (with file and line number when known).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Iterable, Sequence

from ..model import Frame, FrameKind, Profile, Sample, ValueType
from . import v1_8_pb2, v1_9_pb2, v1_10_pb2

DEFAULT_VERSION = "v1.10"
# Layout -> generated module. Field names differ only in v1.8 (`sample`, `line`); numbers differ
# in each (see the .proto files).
MODULES: dict[str, ModuleType] = {"v1.8": v1_8_pb2, "v1.9": v1_9_pb2, "v1.10": v1_10_pb2}
VERSIONS = tuple(MODULES)

SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
BUILD_ID_ATTRIBUTE = "process.executable.build_id.gnu"
FRAME_TYPE_ATTRIBUTE = "profile.frame.type"
# Frame types as the OpenTelemetry eBPF profiler names them.
FRAME_TYPES = {FrameKind.KERNEL: "kernel", FrameKind.NATIVE: "native", FrameKind.PYTHON: "cpython",
               FrameKind.JIT: "jit", FrameKind.JS: "v8js", FrameKind.JAVA: "jvm"}
FRAME_TYPES[FrameKind.RUBY] = "ruby"
FRAME_TYPES[FrameKind.PHP] = "php"
FRAME_TYPES[FrameKind.PERL] = "perl"

# Sample labels that OBI trace correlation sets (sampling/obi.py): they become the sample's Link.
LINK_ATTRIBUTES = ("trace_id", "span_id")

AttributeValue = str | bool | int | float
# One row: frames (leaf first), value, sample attributes.
Row = tuple[Sequence[Frame], int, Sequence[tuple[str, AttributeValue]]]
Attributes = Callable[[Sample], Sequence[tuple[str, AttributeValue]]]


def comm_and_trace(sample: Sample) -> Sequence[tuple[str, AttributeValue]]:
    """The default sample attributes: the thread's command name, and its OBI trace/span (which
    becomes the sample's link)."""
    trace = tuple(label for label in sample.labels if label[0] in LINK_ATTRIBUTES)
    return (("proc.comm", sample.comm),) + trace if sample.comm else trace


def all_labels(sample: Sample) -> Sequence[tuple[str, AttributeValue]]:
    """Every label of the sample as an attribute (a profile whose labels were chosen for export)."""
    return sample.labels


@dataclass(frozen=True)
class OtlpOptions:
    """How a Profile is written: the wire layout, where it comes from, which sample attributes."""

    period: int | None = None          # None: the profile's (1e9/Hz, or 1 for events)
    service_name: str = "hotstack"
    service_version: str = ""
    scope_name: str = "hotstack"
    scope_version: str = ""
    attributes: Attributes = comm_and_trace


@dataclass(frozen=True)
class ProfileHeader:
    """What the Profile says about its samples, and where it comes from."""

    sample_type: ValueType
    period_type: ValueType
    period: int
    start_ns: int
    duration_ns: int
    service_name: str = "hotstack"
    service_version: str = ""
    scope_name: str = "hotstack"
    scope_version: str = ""


class _Dictionary:
    """The request's dictionary, filled in place (`.add()`: no message is built twice)."""

    def __init__(self, pb: ModuleType, msg) -> None:
        self.pb = pb
        self.msg = msg   # the ProfilesDictionary inside the request
        self._lines_field = "line" if pb is v1_8_pb2 else "lines"
        self.strings: dict[str, int] = {"": 0}
        self.attributes: dict[tuple[str, type, AttributeValue], int] = {}
        self.mappings: dict[tuple[str, str], int] = {}
        self.functions: dict[tuple[str, str], int] = {}
        self.locations: dict[Frame, int] = {}
        # Frames are mostly shared objects, and a dataclass hash (8 fields) costs more than the
        # rest of the encoding: look them up by identity first (valid while the rows are alive).
        self.locations_by_id: dict[int, int] = {}
        self.stacks: dict[tuple[int, ...], int] = {(): 0}
        self.links: dict[tuple[bytes, bytes], int] = {(b"", b""): 0}
        for table in (msg.mapping_table, msg.location_table, msg.function_table, msg.link_table,
                      msg.attribute_table, msg.stack_table):
            table.add()   # the zero entry at index 0

    def string(self, s: str) -> int:
        index = self.strings.get(s)
        if index is None:
            index = self.strings[s] = len(self.strings)
        return index

    def attribute(self, key: str, value: AttributeValue) -> int:
        # The type is part of the key: True and 1 are equal in Python but not on the wire.
        dedup = (key, type(value), value)
        index = self.attributes.get(dedup)
        if index is None:
            table = self.msg.attribute_table
            index = self.attributes[dedup] = len(table)
            table.add(key_strindex=self.string(key), value=any_value(self.pb, value))
        return index

    def mapping(self, frame: Frame) -> int:
        if not frame.module:
            return 0
        key = (frame.module, frame.build_id)
        index = self.mappings.get(key)
        if index is None:
            table = self.msg.mapping_table
            index = self.mappings[key] = len(table)
            attrs = [self.attribute(BUILD_ID_ATTRIBUTE, frame.build_id)] if frame.build_id else []
            table.add(filename_strindex=self.string(frame.module), attribute_indices=attrs)
        return index

    def function(self, frame: Frame) -> int:
        key = (frame.name, frame.file)
        index = self.functions.get(key)
        if index is None:
            table = self.msg.function_table
            index = self.functions[key] = len(table)
            name = self.string(frame.name)
            table.add(name_strindex=name, system_name_strindex=name, filename_strindex=self.string(frame.file))
        return index

    def location(self, frame: Frame) -> int:
        index = self.locations.get(frame)
        if index is None:
            table = self.msg.location_table
            index = self.locations[frame] = len(table)
            loc = table.add(mapping_index=self.mapping(frame), address=frame.address, attribute_indices=[
                self.attribute(FRAME_TYPE_ATTRIBUTE, FRAME_TYPES.get(frame.kind, "native"))])
            getattr(loc, self._lines_field).add(function_index=self.function(frame), line=frame.line)
        self.locations_by_id[id(frame)] = index
        return index

    def stack(self, frames: Sequence[Frame]) -> int:
        key = tuple(map(self.locations_by_id.get, map(id, frames)))   # C speed when all are known
        if None in key:
            by_id, location = self.locations_by_id, self.location
            key = tuple([by_id.get(id(f)) or location(f) for f in frames])
        index = self.stacks.get(key)
        if index is None:
            index = self.stacks[key] = len(self.stacks)
            self.msg.stack_table.add(location_indices=key)
        return index

    def link(self, attributes) -> tuple[int, list]:
        """A row's trace/span (OBI's `trace_id`/`span_id` labels, hex) as a link; the other attributes."""
        if not any(k in LINK_ATTRIBUTES for k, _ in attributes):
            return 0, attributes
        ids = {k: v for k, v in attributes if k in LINK_ATTRIBUTES}
        key = (bytes.fromhex(str(ids.get("trace_id", ""))), bytes.fromhex(str(ids.get("span_id", ""))))
        index = self.links.get(key)
        if index is None:
            index = self.links[key] = len(self.links)
            self.msg.link_table.add(trace_id=key[0], span_id=key[1])
        return index, [(k, v) for k, v in attributes if k not in LINK_ATTRIBUTES]

    def finish(self) -> None:
        self.msg.string_table.extend(self.strings)


def any_value(pb: ModuleType, value: AttributeValue):
    if isinstance(value, bool):
        return pb.AnyValue(bool_value=value)
    if isinstance(value, int):
        return pb.AnyValue(int_value=value)
    if isinstance(value, float):
        return pb.AnyValue(double_value=value)
    return pb.AnyValue(string_value=str(value))


def _key_value(pb: ModuleType, key: str, value: str):
    return pb.KeyValue(key=key, value=pb.AnyValue(string_value=value))


def build_request(rows: Iterable[Row], header: ProfileHeader, version: str = DEFAULT_VERSION):
    """The ExportProfilesServiceRequest message of the generated module for `version`."""
    try:
        pb = MODULES[version]
    except KeyError:
        raise ValueError(f"unknown OTLP profiles protocol version {version!r}: expected {', '.join(VERSIONS)}") \
            from None
    request = pb.ExportProfilesServiceRequest()
    d = _Dictionary(pb, request.dictionary)
    # (stack index, attribute indices, link index) -> summed value: one sample per identity.
    merged: dict[tuple[int, tuple[int, ...], int], int] = {}
    stack, attribute = d.stack, d.attribute
    for frames, value, attributes in rows:
        if not value:
            continue
        link, attributes = d.link(attributes)
        key = (stack(frames), tuple(sorted({attribute(k, v) for k, v in attributes})), link)
        merged[key] = merged.get(key, 0) + value

    profile = request.resource_profiles.add(schema_url=SCHEMA_URL).scope_profiles.add(schema_url=SCHEMA_URL) \
        .profiles.add(period=header.period, time_unix_nano=header.start_ns, duration_nano=header.duration_ns)
    add = getattr(profile, "sample" if pb is v1_8_pb2 else "samples").add
    for (s, a, k), v in merged.items():
        add(stack_index=s, attribute_indices=a, link_index=k, values=(v,))
    profile.sample_type.type_strindex = d.string(header.sample_type.type)
    profile.sample_type.unit_strindex = d.string(header.sample_type.unit)
    profile.period_type.type_strindex = d.string(header.period_type.type)
    profile.period_type.unit_strindex = d.string(header.period_type.unit)
    rp = request.resource_profiles[0]
    rp.resource.attributes.extend([_key_value(pb, "service.name", header.service_name),
                                   _key_value(pb, "service.version", header.service_version)])
    scope = rp.scope_profiles[0].scope
    scope.name, scope.version = header.scope_name, header.scope_version
    d.finish()
    return request


def response_class(version: str):
    return MODULES[version].ExportProfilesServiceResponse


def encode_profile(profile: Profile, version: str = DEFAULT_VERSION, options: OtlpOptions | None = None) -> bytes:
    """A Profile as serialized ExportProfilesServiceRequest bytes of wire layout `version`."""
    o = options or OtlpOptions()
    h = ProfileHeader(sample_type=profile.sample_type, period_type=profile.period_type,
                      period=profile.period if o.period is None else o.period, start_ns=profile.start_ns,
                      duration_ns=profile.duration_ns, service_name=o.service_name,
                      service_version=o.service_version, scope_name=o.scope_name, scope_version=o.scope_version)
    rows = ((s.stack, s.value, o.attributes(s)) for s in profile.samples)
    return build_request(rows, h, version).SerializeToString()
