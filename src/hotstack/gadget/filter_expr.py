"""`--filter-expr`: `ig run`'s row filter in expr-lang syntax, the part of it a row filter uses.

    proc.comm == "nginx" && proc.pid > 100
    proc.comm matches "^py" or not (k8s.namespace in ["kube-system", "monitoring"])
    kern_stack contains "do_syscall_64" && !(proc.comm startsWith "kworker")

Fields by their datasource names (dots and all); literals: strings ("..." or '...'), numbers,
true, false, nil, lists [a, b]; operators: == != < <= > >=, matches (a regular expression),
contains, startsWith, endsWith, in, not in; && and, || or, ! not; parentheses. Anything else
(arithmetic, functions, closures) is one error naming where it stopped reading.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .datasource import DataSource, Field

FLAG = "--filter-expr"
_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+\.\d+|\d+)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],-])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
)""", re.X)
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "contains": lambda a, b: str(b) in str(a), "startsWith": lambda a, b: str(a).startswith(str(b)),
    "endsWith": lambda a, b: str(a).endswith(str(b)), "in": lambda a, b: a in b,
}
_ORDERING = ("<", "<=", ">", ">=")
_LITERALS = {"true": True, "false": False, "nil": None}
_NUMERIC = ("uint32", "uint64", "int64", "float64")

Value = Callable[[Any], Any]   # a sample -> a value


class _Literal:
    """A value written in the expression (the same for every sample)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, _sample: Any) -> Any:
        return self.value


class _Parser:
    def __init__(self, text: str, ds: DataSource) -> None:
        self.text, self.ds = text, ds
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                self.fail(len(text) - len(text[pos:].lstrip()), "cannot read this")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def fail(self, pos: int, why: str):
        raise ConfigError(f"{FLAG} {self.text!r}: {why} at column {pos + 1} ({self.text[pos:pos + 20]!r})")

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def take(self) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            self.fail(len(self.text), "unexpected end")
        self.i += 1
        return self.tokens[self.i - 1]

    def expect(self, word: str) -> None:
        _kind, got, pos = self.take()
        if got != word:
            self.fail(pos, f"expected {word!r}")

    def parse(self) -> Callable[[Any], bool]:
        node, _field = self.or_()
        if self.i < len(self.tokens):
            self.fail(self.tokens[self.i][2], "unexpected text")
        return lambda sample: bool(node(sample))

    def or_(self):
        left, field = self.and_()
        while self.peek() in ("||", "or"):
            self.take()
            right, _ = self.and_()
            left, field = (lambda s, a=left, b=right: bool(a(s)) or bool(b(s))), None
        return left, field

    def and_(self):
        left, field = self.not_()
        while self.peek() in ("&&", "and"):
            self.take()
            right, _ = self.not_()
            left, field = (lambda s, a=left, b=right: bool(a(s)) and bool(b(s))), None
        return left, field

    def not_(self):
        if self.peek() in ("!", "not"):
            self.take()
            inner, _ = self.not_()
            return (lambda s: not inner(s)), None
        return self.comparison()

    def comparison(self):
        left, lfield = self.primary()
        op = self.peek()
        if op == "not" and self.i + 1 < len(self.tokens) and self.tokens[self.i + 1][1] == "in":
            self.take()
            self.take()
            right, _ = self.primary()
            return (lambda s: left(s) not in right(s)), None
        if op not in _COMPARE and op != "matches":
            return left, lfield
        _kind, _, pos = self.take()
        right, _ = self.primary()
        if op == "matches":
            return self._matches(left, right, pos), None
        self._check_types(op, lfield, right, pos)
        fn = _COMPARE[op]
        return (lambda s: _safe(fn, left(s), right(s))), None

    def _matches(self, left: Value, right: Value, pos: int):
        if not isinstance(right, _Literal) or not isinstance(right.value, str):
            self.fail(pos, "matches needs a regular expression in quotes")
        try:
            pattern = re.compile(right.value)
        except re.error as e:
            self.fail(pos, f"bad regular expression ({e})")
        return lambda s: pattern.search(str(left(s))) is not None

    def _check_types(self, op: str, lfield: Field | None, right: Value, pos: int) -> None:
        """A field compared with a literal of another type (a number field with a string) is an
        error, as expr-lang's type check makes it, not a comparison that is always false."""
        if lfield is None or not isinstance(right, _Literal) or op in ("in", "contains", "startsWith", "endsWith"):
            return
        value = right.value
        numeric_field = lfield.kind in _NUMERIC
        if value is not None and numeric_field != isinstance(value, (int, float)) and not isinstance(value, bool):
            self.fail(pos, f"{lfield.name} is {lfield.kind}, compared with {value!r}")
        if op in _ORDERING and value is None:
            self.fail(pos, f"{op} with nil")

    def primary(self) -> tuple[Value, Field | None]:
        kind, word, pos = self.take()
        if kind == "num":
            return _Literal(float(word) if "." in word else int(word)), None
        if kind == "str":
            try:
                return _Literal(ast.literal_eval(word)), None
            except (SyntaxError, ValueError):
                self.fail(pos, "bad escape in a string")
        if word == "-":
            inner, _ = self.primary()
            if not isinstance(inner, _Literal) or not isinstance(inner.value, (int, float)):
                self.fail(pos, "'-' goes before a number")
            return _Literal(-inner.value), None
        if word == "(":
            node, field = self.or_()
            self.expect(")")
            return node, field
        if word == "[":
            return self._list()
        if kind == "name" and word in _LITERALS:
            return _Literal(_LITERALS[word]), None
        if kind == "name":
            return self._field(word, pos)
        self.fail(pos, "expected a field, a literal or '('")

    def _list(self) -> tuple[Value, None]:
        items: list[Value] = []
        while self.peek() != "]":
            item, _ = self.primary()
            items.append(item)
            if self.peek() != "]":
                self.expect(",")
        self.take()
        return (lambda s: [item(s) for item in items]), None

    def _field(self, name: str, pos: int) -> tuple[Value, Field]:
        try:
            field = self.ds.field(name)
        except KeyError:
            self.fail(pos, f"datasource {self.ds.name!r} has no field {name!r} (fields: "
                           f"{', '.join(f.name for f in self.ds.fields)})")
        return field.of, field


def _safe(fn, a, b) -> bool:
    try:
        return bool(fn(a, b))
    except TypeError:       # nil against a value, a list of mixed types: no match
        return False


def compile_filter_expr(text: str, ds: DataSource) -> Callable[[Any], bool]:
    """A predicate on samples for `--filter-expr TEXT`, or one ConfigError naming the column."""
    if not text.strip():
        raise ConfigError(f"{FLAG} '': expected an expression, e.g. proc.comm == \"nginx\"")
    return _Parser(text, ds).parse()
