"""The standard library that configs use: sys.env, string.*, array.*, encoding.*, coalesce, ...

Namespaced names are current; the flat names (`env`, `format`, `join`, `concat`, ...) are
Alloy's deprecated aliases, still accepted because older configs use them.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import socket
import urllib.parse

import yaml

from ... import __version__
from .values import Function, is_zero, type_name


class CallError(Exception):
    """A function was called with bad arguments; the evaluator adds the position."""


def _str(name: str, value: object, what: str = "argument") -> str:
    if not isinstance(value, str):
        raise CallError(f"{name}: {what} must be a string, got {type_name(value)}")
    return value


_VERB = re.compile(r"%([-+# 0]*)(\d+|\*)?(?:\.(\d+))?([a-zA-Z%])")


def _format_value(flags: str, width: str | None, prec: str | None, verb: str, arg: object) -> str:
    if verb in "vs":
        text = _go_string(arg)
    elif verb == "q":
        text = json.dumps(_go_string(arg))
    elif verb == "d":
        if isinstance(arg, bool) or not isinstance(arg, (int, float)):
            return f"%!d({type_name(arg)}={_go_string(arg)})"
        text = str(int(arg))
    elif verb in "feEgG":
        if isinstance(arg, bool) or not isinstance(arg, (int, float)):
            return f"%!{verb}({type_name(arg)}={_go_string(arg)})"
        p = int(prec) if prec is not None else (6 if verb in "feE" else None)
        text = format(float(arg), f".{p}{verb}" if p is not None else verb)
    elif verb == "t":
        text = "true" if arg else "false"
    elif verb in "xX":
        text = (format(int(arg), verb) if isinstance(arg, int) else str(arg).encode().hex())
        text = text.upper() if verb == "X" else text
    else:
        return f"%!{verb}({_go_string(arg)})"
    if width:
        w = int(width)
        text = text.ljust(w) if "-" in flags else text.rjust(w, "0" if "0" in flags and verb in "dfeg" else " ")
    return text


def _go_string(value: object) -> str:
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + " ".join(_go_string(v) for v in value) + "]"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_string(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def string_format(fmt: object, *args: object) -> str:
    """Go's fmt.Sprintf for the verbs configs use (%s %v %q %d %f %g %t %x %%)."""
    fmt = _str("string.format", fmt, "format")
    out: list[str] = []
    pos = 0
    remaining = list(args)
    for m in _VERB.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, verb = m.groups()
        if verb == "%":
            out.append("%")
            continue
        if not remaining:
            out.append(f"%!{verb}(MISSING)")
            continue
        out.append(_format_value(flags, width, prec, verb, remaining.pop(0)))
    out.append(fmt[pos:])
    if remaining:
        out.append("%!(EXTRA " + ", ".join(f"{type_name(a)}={_go_string(a)}" for a in remaining) + ")")
    return "".join(out)


def string_join(items: object, sep: object) -> str:
    if not isinstance(items, list):
        raise CallError(f"string.join: first argument must be an array, got {type_name(items)}")
    return _str("string.join", sep).join(_str("string.join", i, "array element") for i in items)


def array_concat(*arrays: object) -> list:
    out: list = []
    for a in arrays:
        if not isinstance(a, list):
            raise CallError(f"array.concat: arguments must be arrays, got {type_name(a)}")
        out.extend(a)
    return out


def coalesce(*values: object) -> object:
    for v in values:
        if not is_zero(v):
            return v
    return values[-1] if values else None


def combine_maps(left: object, right: object, keys: object) -> list:
    """array.combine_maps: join two lists of objects on equal values of `keys`."""
    if not (isinstance(left, list) and isinstance(right, list) and isinstance(keys, list)):
        raise CallError("array.combine_maps: arguments must be (array, array, array of keys)")
    out = []
    for a in left:
        for b in right:
            if all(k in a and k in b and a[k] == b[k] for k in keys):
                out.append({**a, **b})
    return out


def from_json(text: object) -> object:
    try:
        return json.loads(_str("encoding.from_json", text))
    except json.JSONDecodeError as e:
        raise CallError(f"encoding.from_json: {e}") from None


def from_yaml(text: object) -> object:
    try:
        return yaml.safe_load(_str("encoding.from_yaml", text))
    except yaml.YAMLError as e:
        raise CallError(f"encoding.from_yaml: {str(e).splitlines()[0]}") from None


def from_base64(text: object) -> str:
    try:
        return base64.b64decode(_str("encoding.from_base64", text), validate=True).decode()
    except ValueError as e:
        raise CallError(f"encoding.from_base64: {e}") from None


def _one(name: str, fn):
    return Function(name, lambda *a: fn(*(_str(name, x) for x in a)), 1, 1)


def _trim(s: object, cutset: object) -> str:
    return _str("string.trim", s).strip(_str("string.trim", cutset))


def _trim_prefix(s: object, prefix: object) -> str:
    s, prefix = _str("string.trim_prefix", s), _str("string.trim_prefix", prefix)
    return s[len(prefix):] if prefix and s.startswith(prefix) else s


def _trim_suffix(s: object, suffix: object) -> str:
    s, suffix = _str("string.trim_suffix", s), _str("string.trim_suffix", suffix)
    return s[:-len(suffix)] if suffix and s.endswith(suffix) else s


def _env(name: object) -> str:
    return os.environ.get(_str("sys.env", name), "")


def _path_join(*parts: object) -> str:
    return os.path.join(*(_str("file.path_join", p) for p in parts)) if parts else ""


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def build() -> dict:
    """The global scope: namespaces of functions and constants, plus the deprecated flat names."""
    fns = {
        "sys": {"env": Function("sys.env", _env, 1, 1)},
        "string": {
            "format": Function("string.format", string_format, 1, None),
            "join": Function("string.join", string_join, 2, 2),
            "split": Function("string.split", lambda s, sep: _str("string.split", s).split(_str("string.split", sep))
                              if sep else list(_str("string.split", s)), 2, 2),
            "replace": Function("string.replace", lambda s, old, new: _str("string.replace", s).replace(
                _str("string.replace", old), _str("string.replace", new)), 3, 3),
            "to_lower": _one("string.to_lower", str.lower),
            "to_upper": _one("string.to_upper", str.upper),
            "trim": Function("string.trim", _trim, 2, 2),
            "trim_prefix": Function("string.trim_prefix", _trim_prefix, 2, 2),
            "trim_suffix": Function("string.trim_suffix", _trim_suffix, 2, 2),
            "trim_space": _one("string.trim_space", str.strip),
        },
        "array": {
            "concat": Function("array.concat", array_concat, 0, None),
            "combine_maps": Function("array.combine_maps", combine_maps, 3, 3),
        },
        "encoding": {
            "from_json": Function("encoding.from_json", from_json, 1, 1),
            "from_yaml": Function("encoding.from_yaml", from_yaml, 1, 1),
            "from_base64": Function("encoding.from_base64", from_base64, 1, 1),
            "to_json": Function("encoding.to_json", lambda v: json.dumps(v, separators=(",", ":")), 1, 1),
            "to_base64": _one("encoding.to_base64", lambda s: base64.b64encode(s.encode()).decode()),
            "url_encode": _one("encoding.url_encode", lambda s: urllib.parse.quote(s, safe="")),
            "url_decode": _one("encoding.url_decode", urllib.parse.unquote),
        },
        "convert": {"nonsensitive": Function("convert.nonsensitive", lambda s: s, 1, 1)},
        "file": {"path_join": Function("file.path_join", _path_join, 0, None)},
        "constants": {"hostname": socket.gethostname(), "os": "linux", "arch": _arch(), "version": __version__},
        "coalesce": Function("coalesce", coalesce, 0, None),
    }
    deprecated = {
        "env": fns["sys"]["env"], "format": fns["string"]["format"], "join": fns["string"]["join"],
        "concat": fns["array"]["concat"], "json_decode": fns["encoding"]["from_json"],
        "yaml_decode": fns["encoding"]["from_yaml"], "base64_decode": fns["encoding"]["from_base64"],
        "nonsensitive": fns["convert"]["nonsensitive"], "split": fns["string"]["split"],
        "replace": fns["string"]["replace"], "to_lower": fns["string"]["to_lower"],
        "to_upper": fns["string"]["to_upper"], "trim": fns["string"]["trim"],
        "trim_prefix": fns["string"]["trim_prefix"], "trim_suffix": fns["string"]["trim_suffix"],
        "trim_space": fns["string"]["trim_space"],
    }
    return {**fns, **deprecated}
