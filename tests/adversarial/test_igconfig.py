"""Hostile ig-config.yaml files: binary, deeply nested, duplicate exporter names; a YAML fuzzer."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hotstack.errors import ConfigError
from hotstack.gadget.igconfig import load_config, profile_exporters

from .conftest import assert_one_line

EXPORTER = """\
      {name}:
        exporter: otlp-grpc
        endpoint: "127.0.0.1:{port}"
        insecure: true
"""


def run_with_config(cli, path):
    return cli("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1", "--config", str(path), "--otel-profiles-exporter", "a")


def test_duplicate_exporter_names_name_both_lines(cli, tmp_path):
    """Issue 18 item 15: the second `a` silently replaced the first."""
    path = tmp_path / "ig-config.yaml"
    path.write_text("operator:\n  otel-profiles:\n    exporters:\n" + EXPORTER.format(name="a", port=4317)
                    + EXPORTER.format(name="a", port=4318))
    assert_one_line(run_with_config(cli, path), str(path), "duplicate key 'a' at line 8 (first at line 4)")


@pytest.mark.parametrize("data, fragment", [
    (b"\xff\xfe\x00\x00binary", "not UTF-8 text (byte 0xff at line 1)"),
    (b"operator:\n  x: \x80\x81\n", "not UTF-8 text (byte 0x80 at line 2)"),
    (b"a: " + b"[" * 100_000, "nested deeper than 64 levels at line 1"),
    (b"a: " + b"{b: " * 100_000, "nested deeper than 64 levels at line 1"),
    (b"".join(b"  " * i + b"k%d:\n" % i for i in range(300)), "nested deeper than 64 levels at line 64"),
    (b"a: &x [1]\n" + b"".join(b"b%d: &x%d [*x, *x]\n" % (i, i) for i in range(5)), ""),
], ids=["binary", "binary-line-2", "deep-flow-list", "deep-flow-map", "deep-block", "aliases"])
def test_hostile_yaml_is_one_line(cli, tmp_path, data, fragment):
    """Issue 18 item 8: UnicodeDecodeError and RecursionError tracebacks."""
    path = tmp_path / "ig-config.yaml"
    path.write_bytes(data)
    r = run_with_config(cli, path)
    assert_one_line(r, str(path), fragment)


def test_huge_yaml_is_refused(cli, tmp_path):
    path = tmp_path / "ig-config.yaml"
    path.write_bytes(b"# padding\n" * 200_000)
    assert_one_line(run_with_config(cli, path), "larger than 1 MiB")


def test_directory_as_config(cli, tmp_path):
    assert_one_line(run_with_config(cli, tmp_path), "is a directory")


# -- properties ---------------------------------------------------------------------------------
yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(yaml_values)
def test_any_yaml_document_is_exporters_or_one_config_error(tmp_path_factory, value):
    """Any YAML document (valid YAML, any shape) gives exporters or a ConfigError naming the file."""
    path = tmp_path_factory.mktemp("y") / "ig-config.yaml"
    path.write_text(yaml.safe_dump({"operator": {"otel-profiles": {"exporters": value}}}))
    try:
        profile_exporters(load_config(str(path)), str(path))
    except ConfigError as e:
        assert str(path) in str(e) and "\n" not in str(e)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_a_mapping_or_one_config_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("b") / "ig-config.yaml"
    path.write_bytes(data)
    try:
        assert isinstance(load_config(str(path)), dict)
    except ConfigError as e:
        assert str(e).startswith(f"--config {path}: ")


# -- keys hotstack does not read --------------------------------------------------------------------
IG_EXTRA_KEYS = """\
operator:
  otel-profiles:
    exporters:
      a:
        exporter: otlp-grpc
        endpoint: "127.0.0.1:4317"
        insecure: true
        temporality: delta
        compresion: gzip
      b:
        exporter: otlp-grpc
        endpoint: "127.0.0.1:4318"
        temporality: delta
"""


def test_unknown_exporter_keys_warn_once_each_with_the_closest_known_key(tmp_path):
    """An ig-config.yaml written for Inspektor Gadget may hold keys hotstack does not read (`ig`
    ignores them): one warning per key, naming it and the closest key hotstack reads (a typo stays
    visible), and the exporters are still configured."""
    path = tmp_path / "ig-config.yaml"
    path.write_text(IG_EXTRA_KEYS)
    warned: list[str] = []
    exporters = profile_exporters(load_config(str(path)), str(path), warn=warned.append)
    assert sorted(exporters) == ["a", "b"] and exporters["a"].compression == "none"
    assert len(warned) == 2, warned
    typo, extra = warned
    assert "exporters.a: key 'compresion'" in typo and "closest key it reads: 'compression'" in typo, typo
    assert "exporters.a, b: key 'temporality'" in extra and "ignored" in extra and str(path) in extra, extra


def test_unknown_key_beside_a_wrong_value_of_a_known_key_is_still_an_error(cli, tmp_path):
    path = tmp_path / "ig-config.yaml"
    path.write_text(IG_EXTRA_KEYS.replace("insecure: true", "insecure: maybe"))
    assert_one_line(run_with_config(cli, path), "exporters.a", "insecure must be true or false")


def test_unknown_key_run_goes_on_with_one_warning(tmp_path):
    """As a user runs it: the run goes on (exit 0) and says the ignored key once."""
    from ..conftest import hotstack
    path = tmp_path / "ig-config.yaml"
    path.write_text(IG_EXTRA_KEYS.replace("        compresion: gzip\n", ""))
    r = hotstack("run", "profile_cpu", "--config", str(path), "--timeout", "1", "-o", "none", "--host")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if "temporality" in line]
    assert len(lines) == 1 and lines[0].startswith("hotstack: warning: "), r.stderr
