"""Inspektor Gadget's config file (`--config ig-config.yaml`): the parts hotstack reads.

Only `operator.otel-profiles.exporters.<name>` is used; other keys of the file (root flags,
`runtime.*`, other operators) are accepted and ignored, as `ig` ignores what it does not know.
Every problem is one line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from ..export.otlp_grpc import OtlpGrpcConfig

EXPORTERS_KEY = "operator.otel-profiles.exporters"
# Keys of an exporter block: Inspektor Gadget's four, then ours.
EXPORTER_KEYS = ("exporter", "compression", "endpoint", "insecure", "protocol-version", "ca-file")


def load_config(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--config {path}: invalid YAML{where}: {problem}") from None
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


def profile_exporters(data: dict[str, Any], path: str) -> dict[str, OtlpGrpcConfig]:
    """Every exporter block, validated (type, compression, endpoint, protocol version)."""
    exporters = {}
    for name, block in _section(data, EXPORTERS_KEY, path).items():
        where = f"--config {path}: {EXPORTERS_KEY}.{name}"
        if not isinstance(block, dict):
            raise ConfigError(f"{where}: expected a mapping with exporter, endpoint, compression, insecure")
        unknown = sorted(set(map(str, block)) - set(EXPORTER_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(EXPORTER_KEYS)})")
        if "endpoint" not in block:
            raise ConfigError(f"{where}: endpoint is required (host:port)")
        insecure = block.get("insecure", False)
        if not isinstance(insecure, bool):
            raise ConfigError(f"{where}: insecure must be true or false, not {insecure!r}")
        compression = block.get("compression") or "none"     # "" means none, as in Inspektor Gadget
        cfg = OtlpGrpcConfig(name=str(name), endpoint=str(block["endpoint"]),
                             exporter=str(block.get("exporter", "")), insecure=insecure,
                             compression=str(compression),
                             protocol_version=str(block.get("protocol-version", "v1.10")),
                             ca_file=str(block.get("ca-file", "")))
        try:
            cfg.validate()
        except ConfigError as e:
            raise ConfigError(f"--config {path}: {e}") from None
        exporters[str(name)] = cfg
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
