"""Datasources in Inspektor Gadget's shape: named fields with annotations, and rows.

Consumers (the OTLP exporter, the renderers) read only fields and annotations, so
any datasource that carries `profiles.*` annotations can be exported as profiles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..profile.model import Frame, Profile, Sample


@dataclass
class Field:
    name: str
    kind: str                      # string | uint32 | uint64 | int64 | bool | float64 | stack
    annotations: dict[str, str] = field(default_factory=dict)
    # How a gadget fills the field from a sample of its Profile; a stack field also gives its
    # frames, which exporters use instead of the field's text.
    of: Callable[[Sample], Any] | None = None
    frames: Callable[[Sample], Sequence[Frame]] | None = None

    @property
    def hidden(self) -> bool:
        return self.annotations.get("columns.hidden") == "true"


@dataclass
class DataSource:
    name: str
    fields: list[Field]
    annotations: dict[str, str] = field(default_factory=dict)
    # Older names of fields (hotstack's before it took ig's): still accepted wherever a field is named.
    aliases: dict[str, str] = field(default_factory=dict)

    def field(self, name: str) -> Field:
        name = self.aliases.get(name, name)
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def has_field(self, name: str) -> bool:
        name = self.aliases.get(name, name)
        return any(f.name == name for f in self.fields)

    def annotate(self, specs: list[str]) -> None:
        """Apply `--annotate` values: `ds:key=value` or `ds.field:key=value`, comma-separated.
        A value may itself be a list (`samples:profiles.stack-fields=kern_stack,user_stack`): a
        piece after a comma that is not `TARGET:KEY=...` continues the previous value."""
        for spec in specs:
            for item in _annotation_items(spec):
                target, sep, assignment = item.partition(":")
                key, eq, value = assignment.partition("=")
                if not sep or not eq or not key:
                    raise ConfigError(f"--annotate {item!r}: expected DATASOURCE[.FIELD]:KEY=VALUE")
                ds_name, dot, field_name = target.partition(".")
                if ds_name != self.name:
                    raise ConfigError(f"--annotate {item!r}: no datasource {ds_name!r} (this gadget has {self.name!r})")
                if not dot:
                    self.annotations[key] = value
                    continue
                try:
                    self.field(field_name).annotations[key] = value
                except KeyError:
                    names = ", ".join(f.name for f in self.fields)
                    raise ConfigError(f"--annotate {item!r}: datasource {self.name!r} has no field "
                                      f"{field_name!r} (fields: {names})") from None


def _annotation_items(spec: str) -> list[str]:
    items: list[str] = []
    for piece in (p.strip() for p in spec.split(",")):
        if not piece:
            continue
        if items and not _STARTS_ANNOTATION.match(piece):
            items[-1] += "," + piece
        else:
            items.append(piece)
    return items


_STARTS_ANNOTATION = re.compile(r"^[^:=,\s]+:[^=:,\s]+=")

Row = dict[str, Any]


def rows(ds: DataSource, profile: Profile) -> list[Row]:
    """The datasource's rows for a Profile: one per sample, each field as the gadget fills it."""
    filled = [f for f in ds.fields if f.of is not None]
    return [{f.name: f.of(s) for f in filled} for s in profile.samples]
