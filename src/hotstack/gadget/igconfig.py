"""Inspektor Gadget's config file (`--config ig-config.yaml`): the parts hotstack reads.

Only `operator.otel-profiles.exporters.<name>` is used; other keys of the file (root flags,
`runtime.*`, other operators) are accepted and ignored, as `ig` ignores what it does not know; a
key inside an exporter block that hotstack does not read is ignored with one warning naming it
and the closest key it reads. Every error is one line naming the file and the key.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import ConfigError
from ..export.otlp_grpc import OtlpGrpcConfig

EXPORTERS_KEY = "operator.otel-profiles.exporters"
# Keys of an exporter block: Inspektor Gadget's four, then ours.
EXPORTER_KEYS = ("exporter", "compression", "endpoint", "insecure", "protocol-version", "ca-file")
# The OTLP profiles layout of a block without `protocol-version`: the one of the receiver in
# Inspektor Gadget's guide (grafana/pyroscope:1.15.0, as Collectors 0.136-0.139), so that the
# guide's ig-config.yaml works as written. Newer receivers need `protocol-version: v1.9`
# (Collectors 0.140-0.147) or `v1.10` (Pyroscope >= 1.20, Collectors >= 0.148).
DEFAULT_PROTOCOL_VERSION = "v1.8"


MAX_CONFIG_BYTES = 1 << 20      # an ig-config.yaml is a few hundred bytes; a larger one is a mistake
MAX_DEPTH = 64                  # nesting of mappings and lists (the file needs 4)


class _Rejected(Exception):
    """A problem found while composing the document; the message names its line."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded in nesting (its composer recurses once per level, so a
    deeply nested file would end in RecursionError) and refusing duplicate keys, which YAML
    forbids and PyYAML would silently resolve as "the last one wins"."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Rejected(f"nested deeper than {MAX_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:      # an unhashable key: PyYAML's own error follows
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise _Rejected(f"duplicate key {key!r} at line {line} (first at line {first})")
            seen[key] = line
        return super().construct_mapping(node, deep)


def load_config(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(f"--config {path}: is a directory")
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it: {e.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config {path}: larger than {MAX_CONFIG_BYTES >> 20} MiB (an ig-config.yaml "
                          f"is a few lines)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ConfigError(f"--config {path}: not UTF-8 text (byte {raw[e.start]:#04x} at line {line})") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)   # noqa: S506 - a SafeLoader subclass
    except _Rejected as e:
        raise ConfigError(f"--config {path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--config {path}: invalid YAML{where}: {problem}") from None
    except RecursionError:     # a path of PyYAML the depth bound does not cover
        raise ConfigError(f"--config {path}: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a mapping at the top level, found {type(data).__name__}")
    return data


def _section(data: dict[str, Any], dotted: str, path: str) -> dict[str, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict):
            raise ConfigError(f"--config {path}: {dotted}: expected a mapping")
        node = node.get(part)
        if node is None:
            return {}
    if not isinstance(node, dict):
        raise ConfigError(f"--config {path}: {dotted}: expected a mapping of exporter names")
    return node


def _warn(message: str) -> None:
    print(f"hotstack: warning: {message}", file=sys.stderr)


def unknown_key_warnings(path: str, unknown: dict[str, list[str]]) -> list[str]:
    """One line per key of exporter blocks that hotstack does not read (`ig` ignores them too),
    naming the closest key it reads, so that a typo (`compresion`) stays visible."""
    lines = []
    for key, blocks in sorted(unknown.items()):
        closest = difflib.get_close_matches(key, EXPORTER_KEYS, n=1, cutoff=0.0)[0]
        lines.append(f"--config {path}: {EXPORTERS_KEY}.{', '.join(blocks)}: key {key!r} is not used by hotstack, "
                     f"ignored (the closest key it reads: {closest!r}; it reads {', '.join(EXPORTER_KEYS)})")
    return lines


def _shown(value: Any) -> str:
    text = str(value)
    return text if text.isprintable() else repr(text)   # one line, always


def profile_exporters(data: dict[str, Any], path: str,
                      warn: Callable[[str], None] = _warn) -> dict[str, OtlpGrpcConfig]:
    """Every exporter block, validated (type, compression, endpoint, protocol version); keys that
    hotstack does not read are said once each through `warn`."""
    exporters = {}
    unknown: dict[str, list[str]] = {}
    for name, block in _section(data, EXPORTERS_KEY, path).items():
        shown = _shown(name)
        where = f"--config {path}: {EXPORTERS_KEY}.{shown}"
        if not isinstance(block, dict):
            raise ConfigError(f"{where}: expected a mapping with exporter, endpoint, compression, insecure")
        for key in sorted(set(map(_shown, block)) - set(EXPORTER_KEYS)):
            unknown.setdefault(key, []).append(shown)
        if "endpoint" not in block:
            raise ConfigError(f"{where}: endpoint is required (host:port)")
        insecure = block.get("insecure", False)
        if not isinstance(insecure, bool):
            raise ConfigError(f"{where}: insecure must be true or false, not {insecure!r}")
        compression = block.get("compression") or "none"     # "" means none, as in Inspektor Gadget
        cfg = OtlpGrpcConfig(name=str(name), endpoint=str(block["endpoint"]),
                             exporter=str(block.get("exporter", "")), insecure=insecure,
                             compression=str(compression),
                             protocol_version=str(block.get("protocol-version", DEFAULT_PROTOCOL_VERSION)),
                             ca_file=str(block.get("ca-file", "")))
        try:
            cfg.validate()
        except ConfigError as e:
            raise ConfigError(f"--config {path}: {e}") from None
        exporters[str(name)] = cfg
    for line in unknown_key_warnings(path, unknown):
        warn(line)
    return exporters


def select_exporters(flag: str, datasource: str, exporters: dict[str, OtlpGrpcConfig],
                     config_path: str | None) -> list[OtlpGrpcConfig]:
    """`--otel-profiles-exporter`: `a,b` (every datasource) or `ds1:a,ds2:b` (per datasource)."""
    items = [s.strip() for s in flag.split(",") if s.strip()]
    with_ds = [i for i in items if ":" in i]
    if with_ds and len(with_ds) != len(items):
        raise ConfigError(f"--otel-profiles-exporter {flag!r}: mixed values with and without specifying "
                          f"data source")
    names = []
    for item in items:
        ds, sep, name = item.rpartition(":")
        if sep and ds != datasource:
            raise ConfigError(f"--otel-profiles-exporter {item!r}: no datasource {ds!r} "
                              f"(this gadget has {datasource!r})")
        names.append(name)
    if names and config_path is None:
        raise ConfigError("--otel-profiles-exporter needs --config FILE with "
                          "operator.otel-profiles.exporters (see ig-config.yaml in the docs)")
    selected = []
    for name in names:
        if name not in exporters:
            have = ", ".join(sorted(exporters)) or "none"
            raise ConfigError(f"--otel-profiles-exporter {name}: no exporter {name!r} in {EXPORTERS_KEY} "
                              f"of {config_path} (configured: {have})")
        if exporters[name] not in selected:
            selected.append(exporters[name])
    return selected
