"""Typed arguments of components: declare once, decode and type-check every block against it.

A component's arguments are decoded like Alloy does: defaults first, then the attributes
and blocks the user wrote (unknown ones rejected), then the component's own validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..units import go_duration
from .secret import Secret
from .syntax.ast import Attribute, Block, Body
from .syntax.errors import Pos, AlloySyntaxError
from .syntax.eval import Evaluator
from .syntax.values import Capsule, type_name

REQUIRED = object()


class TypeMismatch(Exception):
    pass


class Type:
    name = "any"

    def check(self, value: object) -> object:
        return value


class _String(Type):
    name = "string"

    def check(self, value):
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)   # Alloy converts numbers to strings
        raise TypeMismatch(f"expected string, got {type_name(value)}")


class _Secret(Type):
    """Alloy's `secret`: a string (or number) in the config, a Secret once decoded, so that it
    is shown as `(secret)` wherever arguments are shown (secret.py)."""
    name = "secret"

    def check(self, value):
        if isinstance(value, Secret):
            return value
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeMismatch(f"expected secret (a string), got {type_name(value)}")
        return Secret(str(value))


class _Bool(Type):
    name = "bool"

    def check(self, value):
        if isinstance(value, bool):
            return value
        raise TypeMismatch(f"expected bool, got {type_name(value)}")


class _Int(Type):
    name = "number"

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeMismatch(f"expected number, got {type_name(value)}")
        if isinstance(value, float) and not value.is_integer():
            raise TypeMismatch(f"expected a whole number, got {value}")
        return int(value)


class _Float(Type):
    name = "number"

    def check(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeMismatch(f"expected number, got {type_name(value)}")
        return float(value)


def parse_duration(text: str) -> float:
    """A Go duration string ("15s", "1m30s", "500ms", "0") in seconds (units.go_duration)."""
    try:
        return go_duration(text)
    except ValueError:
        raise TypeMismatch(f"invalid duration {text!r} (use e.g. \"15s\", \"500ms\", \"1m30s\")") from None


class _Duration(Type):
    name = "duration"

    def check(self, value):
        if not isinstance(value, str):
            raise TypeMismatch(f"expected duration string, got {type_name(value)}")
        return parse_duration(value)


@dataclass
class ListOf(Type):
    item: Type

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"list({self.item.name})"

    def check(self, value):
        if not isinstance(value, list):
            raise TypeMismatch(f"expected {self.name}, got {type_name(value)}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(self.item.check(v))
            except TypeMismatch as e:
                raise TypeMismatch(f"element {i}: {e}") from None
        return out


@dataclass
class MapOf(Type):
    item: Type

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"map({self.item.name})"

    def check(self, value):
        if not isinstance(value, dict):
            raise TypeMismatch(f"expected {self.name}, got {type_name(value)}")
        out = {}
        for k, v in value.items():
            try:
                out[k] = self.item.check(v)
            except TypeMismatch as e:
                raise TypeMismatch(f"key {k!r}: {e}") from None
        return out


@dataclass
class CapsuleOf(Type):
    capsule_type: str

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.capsule_type

    def check(self, value):
        if isinstance(value, Capsule) and value.capsule_type == self.capsule_type:
            return value
        raise TypeMismatch(f"expected {self.capsule_type}, got {type_name(value)}")


STRING, BOOL, INT, FLOAT, DURATION = _String(), _Bool(), _Int(), _Float(), _Duration()
SECRET = _Secret()
TARGETS = ListOf(MapOf(STRING))


@dataclass
class Arg:
    name: str
    type: Type
    default: object = None
    required: bool = False


@dataclass
class BlockArg:
    name: str
    schema: "Schema"
    repeated: bool = False
    required: bool = False


@dataclass
class Schema:
    items: list[Arg | BlockArg]
    validate: Callable[[dict], None] | None = None     # raise ValueError(message)
    deprecated: dict[str, str] = field(default_factory=dict)   # name -> warning
    track_set: bool = False      # record the names the user wrote under "_set" (for validation)

    def arg(self, name: str) -> Arg | BlockArg | None:
        for it in self.items:
            if it.name == name:
                return it
        return None

    def defaults(self) -> dict:
        out: dict = {}
        for it in self.items:
            if isinstance(it, Arg):
                out[it.name] = list(it.default) if isinstance(it.default, list) else (
                    dict(it.default) if isinstance(it.default, dict) else it.default)
            else:
                out[it.name] = [] if it.repeated else (None if it.required else it.schema.defaults())
        return out


def decode(schema: Schema, body: Body, evaluator: Evaluator, where: str, pos: Pos,
           warn: Callable[[str], None] | None = None) -> dict:
    """Evaluate a block body against its schema; every error names file:line:col and the argument."""
    values = schema.defaults()
    seen: set[str] = set()
    for stmt in body.statements:
        spec = schema.arg(stmt.name)
        if spec is None and stmt.name in schema.deprecated:
            if warn is not None:
                warn(f"{stmt.pos}: {where}: {schema.deprecated[stmt.name]}")
            if isinstance(stmt, Attribute):
                evaluator.eval(stmt.value)
            continue
        if isinstance(stmt, Attribute):
            if not isinstance(spec, Arg):
                kind = "block" if isinstance(spec, BlockArg) else "argument"
                hint = f" (it is a {kind}, write `{stmt.name} {{ ... }}`)" if spec is not None else ""
                raise AlloySyntaxError(stmt.pos, f"{where}: unrecognized argument {stmt.name!r}{hint}")
            if stmt.name in seen:
                raise AlloySyntaxError(stmt.pos, f"{where}: argument {stmt.name!r} is set more than once")
            seen.add(stmt.name)
            value = evaluator.eval(stmt.value)
            if value is None and not spec.required:
                continue   # null leaves the default
            try:
                values[stmt.name] = spec.type.check(value)
            except TypeMismatch as e:
                raise AlloySyntaxError(stmt.value.pos, f"{where}: argument {stmt.name!r}: {e}") from None
        else:
            assert isinstance(stmt, Block)
            if not isinstance(spec, BlockArg):
                hint = " (it is an argument, write `name = value`)" if isinstance(spec, Arg) else ""
                raise AlloySyntaxError(stmt.pos, f"{where}: unrecognized block {stmt.id!r}{hint}")
            if stmt.label:
                raise AlloySyntaxError(stmt.pos, f"{where}: block {stmt.name!r} does not take a label")
            inner = decode(spec.schema, stmt.body, evaluator, f"{where} > {stmt.name}", stmt.pos, warn)
            if spec.repeated:
                values[stmt.name].append(inner)
            else:
                if stmt.name in seen:
                    raise AlloySyntaxError(stmt.pos, f"{where}: block {stmt.name!r} may appear only once")
                values[stmt.name] = inner
            seen.add(stmt.name)
    for it in schema.items:
        if it.required and it.name not in seen:
            kind = "block" if isinstance(it, BlockArg) else "argument"
            raise AlloySyntaxError(pos, f"{where}: missing required {kind} {it.name!r}")
    if schema.track_set:
        values["_set"] = seen
    if schema.validate is not None:
        try:
            schema.validate(values)
        except ValueError as e:
            raise AlloySyntaxError(pos, f"{where}: {e}") from None
    return values
