"""Row selection and shaping as `ig run` spells it: --filter, the container flags, --fields, --sort.

Every rule reads a datasource field by its name (as `ig` names them), so the container flags are
filters on runtime.containerName and k8s.*: `-c a,b` keeps rows of those containers, `-c '!a'`
drops them (ig's syntax). Filters drop samples before anything sees them (tables, files,
exporters); --fields and --sort shape the structured outputs (json, jsonpretty, yaml).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError
from ..profile.model import Profile, Sample
from ..profile.transforms import map_samples
from .datasource import DataSource, Field

# Longest operators first so that `>=` is not read as `>`.
OPERATORS: dict[str, Callable] = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
                                  ">": operator.gt, "<": operator.lt, "~": None}
NUMERIC = ("uint32", "uint64", "int64", "float64")

# (flag, field) of ig's container selection flags.
CONTAINER_FLAGS = (("--containername", "runtime.containerName"), ("--k8s-namespace", "k8s.namespace"),
                   ("--k8s-podname", "k8s.podName"), ("--k8s-containername", "k8s.containerName"))


@dataclass(frozen=True)
class Rule:
    field: Field
    keep: Callable[[object], bool]


def _value(field: Field, text: str, flag: str):
    if field.kind not in NUMERIC:
        return text
    try:
        return float(text) if field.kind == "float64" else int(text, 0)
    except ValueError:
        raise ConfigError(f"{flag} {field.name}: {text!r} is not a number ({field.kind})") from None


def _field(ds: DataSource, name: str, flag: str) -> Field:
    try:
        return ds.field(name)
    except KeyError:
        raise ConfigError(f"{flag} {name!r}: datasource {ds.name!r} has no such field "
                          f"(fields: {', '.join(f.name for f in ds.fields)})") from None


def parse_filter(spec: str, ds: DataSource) -> list[Rule]:
    """`--filter 'f==v,f2~re'`: every comparison must hold (ig's operators == != >= > <= < ~)."""
    rules = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        for op, fn in OPERATORS.items():
            name, sep, text = item.partition(op)
            if sep and name and "=" not in name and "!" not in name and "<" not in name and ">" not in name:
                break
        else:
            raise ConfigError(f"--filter {item!r}: expected FIELD OP VALUE with OP one of {' '.join(OPERATORS)}")
        field = _field(ds, name.strip(), "--filter")
        if op == "~":
            try:
                pattern = re.compile(text)
            except re.error as e:
                raise ConfigError(f"--filter {item!r}: bad regular expression: {e}") from None
            rules.append(Rule(field, lambda v, p=pattern: p.search(str(v)) is not None))
        else:
            want = _value(field, text, "--filter")
            rules.append(Rule(field, lambda v, fn=fn, want=want: fn(v, want)))
    return rules


def expr_rules(text: str, ds: DataSource) -> list[Rule]:
    """`--filter-expr TEXT` (filter_expr.py) as a rule on the whole sample."""
    if not text:
        return []
    from .filter_expr import FLAG, compile_filter_expr
    return [Rule(Field(FLAG, "expr", of=lambda s: s), compile_filter_expr(text, ds))]


def credential_rules(uid: int | None, gid: int | None, ds: DataSource) -> list[Rule]:
    """`--uid`, `--gid` (ig's): only samples of processes with this real user / group id."""
    return [Rule(_field(ds, name, flag), lambda v, want=want: v == want)
            for flag, name, want in (("--uid", "proc.creds.uid", uid), ("--gid", "proc.creds.gid", gid))
            if want is not None]


def container_rules(selections: dict[str, str], ds: DataSource) -> list[Rule]:
    """ig's container flags: a comma list of names to keep, or of `!name`s to drop."""
    rules = []
    for flag, name in CONTAINER_FLAGS:
        spec = selections.get(name, "")
        if not spec:
            continue
        names = [n.strip() for n in spec.split(",") if n.strip()]
        drop = {n[1:] for n in names if n.startswith("!")}
        keep = {n for n in names if not n.startswith("!")}
        if drop and keep:
            raise ConfigError(f"{flag} {spec!r}: give names to keep or '!names' to drop, not both")
        field = _field(ds, name, flag)
        rules.append(Rule(field, (lambda v, k=keep: v in k) if keep else (lambda v, d=drop: v not in d)))
    return rules


def apply(profile: Profile, rules: list[Rule]) -> Profile:
    """The profile with only the samples that every rule keeps."""
    if not rules:
        return profile

    def keep(s: Sample) -> Sample | None:
        return s if all(r.keep(r.field.of(s)) for r in rules) else None
    return map_samples(profile, keep)


_DATASOURCE_PREFIX = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_-]*):")


def for_datasource(spec: str, ds: str, flag: str) -> str:
    """ig's per-datasource form of -o, --fields and --sort (`DS:VALUE`, `DS1:V1;DS2:V2`): the value
    for this gadget's datasource. A value without the form is the value (field names and output
    modes have no ':'); a datasource the gadget does not have is an error, as in ig."""
    parts = spec.split(";")
    prefixed = [_DATASOURCE_PREFIX.match(p) for p in parts]
    if not any(prefixed):
        return spec
    if not all(prefixed):
        raise ConfigError(f"{flag} {spec!r}: mixed values with and without specifying data source")
    value = ""
    for part, m in zip(parts, prefixed):
        if m.group(1) != ds:
            raise ConfigError(f"{flag} {spec!r}: no data source {m.group(1)!r} (this gadget has {ds!r})")
        value = part[m.end():].strip()
    return value


def select_fields(spec: str, ds: DataSource) -> list[str]:
    """`--fields a,b` (only these, in this order) or `+a,-b` (add to / remove from the defaults)."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    shown = [f.name for f in ds.fields if not f.hidden]
    if all(i[0] in "+-" for i in items):
        for i in items:
            name = _field(ds, i[1:], "--fields").name
            if i[0] == "+" and name not in shown:
                shown.append(name)
            elif i[0] == "-" and name in shown:
                shown.remove(name)
        return shown
    if any(i[0] in "+-" for i in items):
        raise ConfigError(f"--fields {spec!r}: give a list of fields, or +field/-field changes, not both")
    return [_field(ds, i, "--fields").name for i in items]


def parse_sort(spec: str, ds: DataSource) -> list[tuple[str, bool]]:
    """`--sort f,-f2`: (field, descending) in order of precedence."""
    keys = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        descending = item.startswith("-")
        keys.append((_field(ds, item.lstrip("+-"), "--sort").name, descending))
    return keys


def sort_rows(rows: list[dict], keys: list[tuple[str, bool]]) -> list[dict]:
    for name, descending in reversed(keys):     # stable sorts, least important key first
        rows.sort(key=lambda r: (r.get(name) is None, r.get(name) if r.get(name) is not None else 0),
                  reverse=descending)
    return rows
