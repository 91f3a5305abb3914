"""Alloy syntax: the seed's examples verbatim, literals, operators, stdlib, and located errors."""

from __future__ import annotations

import pytest

from hotstack.alloy.syntax import parse
from hotstack.alloy.syntax.errors import AlloySyntaxError
from hotstack.alloy.syntax.eval import Evaluator
from hotstack.alloy.syntax.stdlib import build

from .conftest import CONFIGS


@pytest.mark.parametrize("name", ["kubernetes.alloy", "docker.alloy", "beyla_process.alloy"])
def test_seed_examples_parse_verbatim(name):
    body = parse((CONFIGS / name).read_text(), name)
    ids = [b.id for b in body.blocks]
    assert any(i.startswith("pyroscope.ebpf.") for i in ids)
    assert any(i.startswith("pyroscope.write.") for i in ids)


def test_kubernetes_example_structure():
    body = parse((CONFIGS / "kubernetes.alloy").read_text())
    relabel = next(b for b in body.blocks if b.id == "discovery.relabel.local_pods")
    rules = [b for b in relabel.body.blocks if b.name == "rule"]
    assert len(rules) == 7
    k8s = next(b for b in body.blocks if b.id == "discovery.kubernetes.all_pods")
    assert [b.name for b in k8s.body.blocks] == ["selectors"]


def ev(text: str, env: dict | None = None, monkeypatch=None):
    body = parse(f"x = {text}\n")
    return Evaluator(build()).eval(body.attributes[0].value)


@pytest.mark.parametrize("expr,want", [
    ('"a\\tb\\n\\"q\\"\\\\"', 'a\tb\n"q"\\'),
    ('"\\x41\\u00e9\\U0001F600\\101"', "A\u00e9\U0001F600A"),
    ("`raw\\n`", "raw\\n"),
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("2 ^ 3 ^ 2", 512), ("7 % 4", 3), ("-3 + 1", -2),
    ("1.5e2", 150.0), ("10 / 4", 2.5), ("8 / 4", 2),
    ('"a" + "b"', "ab"), ("1 < 2 && 2 <= 2", True), ("!(1 == 1) || false", False), ('"a" != "b"', True),
    ("null", None), ("[1, 2, 3][1]", 2), ('{a = 1, "b.c" = 2}["b.c"]', 2), ('{a = 1}["missing"]', None),
    ("{a = {b = [true]}}.a.b[0]", True),
    ('string.format("%s-%d-%q-%v-%05.1f%%", "x", 3, "y", true, 3.14159)', 'x-3-"y"-true-003.1%'),
    ('string.join(["a", "b"], ",")', "a,b"), ('string.split("a,b", ",")', ["a", "b"]),
    ('string.replace("aXbX", "X", "-")', "a-b-"), ('string.to_upper("ab")', "AB"),
    ('string.trim("xxaxx", "x")', "a"), ('string.trim_prefix("foobar", "foo")', "bar"),
    ('string.trim_suffix("foobar", "bar")', "foo"), ('string.trim_space("  a ")', "a"),
    ('coalesce("", null, 0, "x", "y")', "x"), ('coalesce("", 0)', 0),
    ("array.concat([1], [2, 3])", [1, 2, 3]), ("concat([1], [2])", [1, 2]),
    ('encoding.from_json("{\\"a\\": [1]}")', {"a": [1]}), ('encoding.from_yaml("a: 1")', {"a": 1}),
    ('encoding.to_base64("hi")', "aGk="), ('encoding.from_base64("aGk=")', "hi"),
    ('encoding.url_encode("a b/")', "a%20b%2F"), ('convert.nonsensitive("s")', "s"),
    ('file.path_join("a", "b")', "a/b"), ('constants.os', "linux"),
])
def test_expressions(expr, want):
    assert ev(expr) == want


def test_sys_env(monkeypatch):
    monkeypatch.setenv("HOTSTACK_T", "node-1")
    assert ev('"spec.nodeName=" + sys.env("HOTSTACK_T")') == "spec.nodeName=node-1"
    assert ev('env("HOTSTACK_T_UNSET")') == ""


def test_comments_and_trailing_commas():
    body = parse('/* block\ncomment */\na = [\n  1, // one\n  2,\n]\nb = {\n  k = "v",\n}\n')
    assert [a.name for a in body.attributes] == ["a", "b"]


@pytest.mark.parametrize("text,where,message", [
    ('a = "unterminated\n', "1:5", "string literal not terminated"),
    ("a = [\n  1,\n  2\n]\n", "4:1", "missing ','"),
    ('x "label" {\n  a = \n}\n', "3:1", "expected an expression"),
    ('comp.x "bad-label" {}\n', "1:8", "must be a valid identifier"),
    ("comp.x lbl {}\n", "1:8", "double-quoted"),
    ("a = 1 b = 2\n", "1:7", "expected a newline"),
    ("# comment\n", "1:1", "comments start with //"),
    ('a = "\\q"\n', "1:6", "unknown escape"),
    ("block {\n  a = 1\n", "3:1", "expected '}'"),
    ("a = 1 +\n", "2:1", "expected an expression"),
    ("/* open\n", "1:1", "comment not terminated"),
])
def test_syntax_errors_have_line_and_column(text, where, message):
    with pytest.raises(AlloySyntaxError) as err:
        parse(text, "cfg.alloy")
    assert str(err.value).startswith(f"cfg.alloy:{where}: "), str(err.value)
    assert message in str(err.value)


@pytest.mark.parametrize("expr,message", [
    ("1 + \"a\"", "cannot combine number and string"),
    ("missing_thing", "identifier 'missing_thing' does not exist"),
    ("{a = 1}.b", "field 'b' does not exist"),
    ("[1][5]", "out of range"),
    ('string.join("a", ",")', "must be an array"),
    ("sys.env()", "expected 1 argument"),
    ("1 / 0", "division by zero"),
])
def test_evaluation_errors(expr, message):
    with pytest.raises(AlloySyntaxError) as err:
        ev(expr)
    assert message in str(err.value)
    assert str(err.value).startswith("<config>:1:")
