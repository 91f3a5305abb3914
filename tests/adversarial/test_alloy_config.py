"""Hostile Alloy configs: nesting, size, component count, ports; and a fuzzer of configs."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hotstack.alloy.controller import load_config
from hotstack.errors import ConfigError

from ..conftest import hotstack
from .conftest import assert_one_line

NEST = 100_000


@pytest.mark.parametrize("text", [
    "a = " + "[" * NEST + "]" * NEST,
    "a = " + "(" * NEST + "1" + ")" * NEST,
    "a = " + "{b = " * NEST + "1" + "}" * NEST,
    "a = " + "!" * NEST + "true",
    "a = " + "2^" * NEST + "2",
    "a = " + "1 + " * NEST + "1",
    "a = b" + ".c" * NEST,
    "a = b" + "[0]" * NEST,
    "a = f" + "()" * NEST,
    "b {\n" * NEST + "}\n" * NEST,
], ids=["lists", "parentheses", "objects", "unary", "power", "sum", "access", "index", "call", "blocks"])
def test_deep_nesting_is_one_line(cli, tmp_path, text):
    """Issue 18 item 7: 100,000 levels gave a RecursionError traceback."""
    path = tmp_path / "deep.alloy"
    path.write_text(text)
    assert_one_line(cli("agent", "--validate", str(path)), "nested deeper than 64 levels", str(path))


def test_nesting_up_to_the_limit_evaluates(tmp_path):
    """The bound is where the parser says it is: 64 levels still parse and evaluate."""
    text = ('discovery.relabel "r" {\n  targets = ' + "[" * 63 + "]" * 63 + "\n}\n")
    with pytest.raises(ConfigError, match="targets"):     # a list of lists is not a target: a type error
        load_config(text, "ok.alloy")
    text = 'discovery.relabel "r" {\n  targets = [{"a" = ' + "(" * 60 + '"x"' + ")" * 60 + "}]\n}\n"
    assert load_config(text, "ok.alloy").order == ["discovery.relabel.r"]


def test_huge_config_is_refused_at_once(tmp_path):
    """Issue 18 item 17: an 11 MB config with 160,000 components took 16 s and 608 MB."""
    block = 'pyroscope.write "w{}" {{\n  endpoint {{\n    url = "http://127.0.0.1:4040"\n  }}\n}}\n'
    path = tmp_path / "huge.alloy"
    path.write_text("".join(block.format(i) for i in range(160_000)))
    start = time.monotonic()
    r = hotstack("agent", "--validate", str(path), timeout=120)
    elapsed = time.monotonic() - start
    assert_one_line(r, "larger than hotstack's limit of a config (2 MiB)")
    assert elapsed < 5, elapsed


def test_too_many_components_is_one_line(cli, tmp_path):
    path = tmp_path / "many.alloy"
    path.write_text("".join(f'pyroscope.write "w{i}" {{\n}}\n' for i in range(2001)))
    start = time.monotonic()
    assert_one_line(cli("agent", "--validate", str(path)), "more than 2000 blocks at the top level",
                    f"{path}:4001:1")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("url, fragment", [
    ("http://127.0.0.1:99999", "port must be a number in 1..65535"),
    ("http://127.0.0.1:0", "port must be a number in 1..65535"),
    ("http://127.0.0.1:http", "port must be a number in 1..65535"),
    ("http://[::1", "Invalid IPv6 URL"),
])
def test_endpoint_port_out_of_range_fails_validate(cli, tmp_path, url, fragment):
    """Issue 18 item 12: the ig-config path rejected port 99999; --validate let it pass."""
    path = tmp_path / "port.alloy"
    path.write_text(f'pyroscope.write "w" {{\n  endpoint {{\n    url = "{url}"\n  }}\n}}\n')
    assert_one_line(cli("agent", "--validate", str(path)), fragment)


def test_binary_config_is_one_line(cli, tmp_path):
    path = tmp_path / "bin.alloy"
    path.write_bytes(b'pyroscope.write "w" {\n\xff\xfe\x00\x01}\n')
    assert_one_line(cli("agent", "--validate", str(path)), "is not UTF-8 text (byte 0xff at line 2)")


def test_directory_as_config_is_one_line(cli, tmp_path):
    assert_one_line(cli("agent", "--validate", str(tmp_path)), "cannot read config", "Is a directory")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e300"])
def test_duration_must_be_finite(cli, value):
    assert_one_line(cli("agent", "--duration", value, "--validate"), f"--duration {float(value)}")


# -- properties ---------------------------------------------------------------------------------
TOKENS = ['pyroscope.write', 'pyroscope.ebpf', 'discovery.relabel', 'discovery.process', '"w"', '"x"', "{", "}",
          "[", "]", "(", ")", "=", ",", ".", "\n", " ", "endpoint", "url", '"http://127.0.0.1:4040"', "targets",
          "forward_to", "rule", "1", "1.5e3", "-", "+", "*", "/", "%", "^", "!", "==", "&&", "||", "true",
          "null", "env", "concat", "(", "\"\\u00e9\"", "`raw`", "/*", "*/", "//", "#", "\\", '"', "\t",
          "pyroscope.write.w.receiver", "constants.os", "external_labels", "{\"a\" = \"b\"}"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_any_token_soup_is_a_config_error_or_a_config(tokens):
    """Whatever the text, loading it gives a graph or a ConfigError: never another exception."""
    text = "".join(tokens)
    try:
        load_config(text, "fuzz.alloy")
    except ConfigError as e:
        assert str(e).strip(), text
        assert "Traceback" not in str(e)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_config_error_or_a_config(text):
    try:
        load_config(text, "fuzz.alloy")
    except ConfigError as e:
        assert str(e).strip()


def _nested(depth: int, kind: int) -> str:
    opening, closing = [("[", "]"), ("(", ")"), ("{a = ", "}"), ("-", ""), ("!", "")][kind]
    leaf = "true" if kind == 4 else "1"
    return opening * depth + leaf + closing * depth


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=4))
def test_nesting_is_bounded_exactly(depth, kind):
    """Up to the bound a nested value parses and evaluates; past it, it is the nesting error."""
    text = f'discovery.relabel "r" {{\n  targets = [{{"a" = "b", "c" = {_nested(depth, kind)}}}]\n}}\n'
    try:
        load_config(text, "nest.alloy")
    except ConfigError as e:
        message = str(e)
        if "nested deeper than" in message:
            assert depth + 2 > 60, (depth, message)     # the two outer levels count too
        else:          # a type error of the value: only reachable when it parsed
            assert depth + 2 <= 64, (depth, message)
