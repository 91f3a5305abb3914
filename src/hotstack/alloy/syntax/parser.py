"""Recursive-descent parser of Alloy syntax into the tree of `ast.py`.

Grammar (by precedence, low to high): `||`, `&&`, comparisons, `+ -`, `* / %`, `^`
(right-assoc), unary `! -`, then postfix `.field`, `[index]`, `(call)`.
"""

from __future__ import annotations

from collections.abc import Iterator

from .ast import (Access, ArrayExpr, Attribute, Binary, Block, Body, Call, Expr, Ident, Index, Literal,
                  ObjectExpr, Unary)
from .errors import AlloySyntaxError
from .lexer import Token, iter_tokens

# How deep a config may nest: brackets, parentheses, blocks, unary operators and chains of
# operators or field accesses all count. The parser and every walk of the tree recurse once
# per level; real configs nest under ten, and a hostile one (100,000 '[') must be one clear
# line, not a RecursionError.
MAX_NESTING = 64
# A config is a few kilobytes to a few hundred: these bounds answer a runaway generated file in
# well under a second with a clear error, instead of minutes and gigabytes.
MAX_CONFIG_BYTES = 2 << 20
MAX_COMPONENTS = 2000          # blocks at the top level

_BINARY_LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))


def _is_identifier(text: str) -> bool:
    return bool(text) and (text[0] == "_" or text[0].isalpha()) and all(c == "_" or c.isalnum() for c in text)


class Parser:
    def __init__(self, tokens: Iterator[Token]) -> None:
        self._tokens = tokens
        self._tok = next(tokens)
        self.depth = 0      # recursion of the parser itself

    def _enter(self, pos) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise AlloySyntaxError(pos, f"nested deeper than {MAX_NESTING} levels")

    def _leave(self) -> None:
        self.depth -= 1

    @staticmethod
    def _node(node: Expr, *children: Expr) -> Expr:
        """Record how deep the tree under `node` is (evaluation recurses that deep)."""
        node.depth = 1 + max((c.depth for c in children), default=0)
        if node.depth > MAX_NESTING:
            raise AlloySyntaxError(node.pos, f"expression nested deeper than {MAX_NESTING} levels")
        return node

    @property
    def tok(self) -> Token:
        return self._tok

    def next(self) -> Token:
        t = self._tok
        if t.kind != "EOF":
            self._tok = next(self._tokens)
        return t

    def expect_op(self, op: str, context: str = "") -> Token:
        t = self.tok
        if not t.is_op(op):
            where = f" {context}" if context else ""
            raise AlloySyntaxError(t.pos, f"expected {op!r}{where}, got {t.describe()}")
        return self.next()

    # -- statements ------------------------------------------------------------------------
    def parse_body(self, closing: bool) -> Body:
        body = Body()
        first = True
        while True:
            t = self.tok
            if t.kind == "EOF":
                if closing:
                    raise AlloySyntaxError(t.pos, "expected '}' to close the block, got end of file")
                return body
            if closing and t.is_op("}"):
                return body
            if not first and not t.newline_before:
                raise AlloySyntaxError(t.pos, f"expected a newline before {t.describe()}")
            body.statements.append(self.parse_statement())
            first = False
            if not closing and len(body.statements) > MAX_COMPONENTS:
                raise AlloySyntaxError(t.pos, f"more than {MAX_COMPONENTS} blocks at the top level "
                                          f"(hotstack's limit of components in one config)")

    def parse_statement(self) -> Attribute | Block:
        t = self.next()
        if t.kind != "IDENT":
            raise AlloySyntaxError(t.pos, f"expected an attribute or block name, got {t.describe()}")
        if self.tok.is_op("="):
            self.next()
            return Attribute(str(t.value), self.parse_expr(), t.pos)
        parts = [str(t.value)]
        while self.tok.is_op("."):
            self.next()
            part = self.next()
            if part.kind != "IDENT":
                raise AlloySyntaxError(part.pos, f"expected an identifier after '.', got {part.describe()}")
            parts.append(str(part.value))
        label = ""
        if self.tok.kind == "STRING":
            lt = self.next()
            label = str(lt.value)
            if not _is_identifier(label):
                raise AlloySyntaxError(lt.pos, f"block label {label!r} must be a valid identifier "
                                           "(letters, digits and underscores, not starting with a digit)")
        elif self.tok.kind == "IDENT" and len(parts) > 1:
            raise AlloySyntaxError(self.tok.pos, "block labels must be double-quoted strings")
        if not self.tok.is_op("{"):
            what = "'=' or '{'" if len(parts) == 1 and not label else "'{'"
            raise AlloySyntaxError(self.tok.pos, f"expected {what} after {'.'.join(parts)}, got {self.tok.describe()}")
        self._enter(self.next().pos)
        body = self.parse_body(closing=True)
        self.expect_op("}")
        self._leave()
        return Block(".".join(parts), label, body, t.pos)

    # -- expressions -----------------------------------------------------------------------
    def parse_expr(self, level: int = 0) -> Expr:
        if level == len(_BINARY_LEVELS):
            return self.parse_power()
        left = self.parse_expr(level + 1)
        while self.tok.kind == "OP" and self.tok.value in _BINARY_LEVELS[level]:
            op = self.next()
            right = self.parse_expr(level + 1)
            left = self._node(Binary(str(op.value), left, right, op.pos), left, right)
        return left

    def parse_power(self) -> Expr:
        left = self.parse_unary()
        if self.tok.is_op("^"):
            op = self.next()
            self._enter(op.pos)
            right = self.parse_power()      # right-associative
            self._leave()
            return self._node(Binary("^", left, right, op.pos), left, right)
        return left

    def parse_unary(self) -> Expr:
        if self.tok.is_op("!") or self.tok.is_op("-"):
            op = self.next()
            self._enter(op.pos)
            value = self.parse_unary()
            self._leave()
            return self._node(Unary(str(op.value), value, op.pos), value)
        return self.parse_postfix(self.parse_primary())

    def parse_postfix(self, expr: Expr) -> Expr:
        while True:
            t = self.tok
            if t.is_op("."):
                self.next()
                name = self.next()
                if name.kind != "IDENT":
                    raise AlloySyntaxError(name.pos, f"expected a field name after '.', got {name.describe()}")
                expr = self._node(Access(expr, str(name.value), name.pos), expr)
            elif t.is_op("[") and not t.newline_before:
                self._enter(self.next().pos)
                index = self.parse_expr()
                self.expect_op("]", "to close the index")
                self._leave()
                expr = self._node(Index(expr, index, t.pos), expr, index)
            elif t.is_op("(") and not t.newline_before:
                self._enter(self.next().pos)
                args = self.parse_list(")", "argument list", self.parse_expr)
                self._leave()
                expr = self._node(Call(expr, args, t.pos), expr, *args)
            else:
                return expr

    def parse_list(self, closing: str, what: str, item):
        """Comma-separated items up to `closing`; a trailing comma is needed before a newline."""
        items = []
        while True:
            if self.tok.is_op(closing):
                self.next()
                return items
            items.append(item())
            if self.tok.is_op(","):
                self.next()
                continue
            if self.tok.is_op(closing):
                if self.tok.newline_before:
                    raise AlloySyntaxError(self.tok.pos, f"missing ',' in {what} (a comma is needed after the last "
                                                     f"element when {closing!r} is on a new line)")
                self.next()
                return items
            raise AlloySyntaxError(self.tok.pos, f"expected ',' or {closing!r} in {what}, got {self.tok.describe()}")

    def parse_field(self) -> tuple[str, Expr]:
        key = self.next()
        if key.kind not in ("IDENT", "STRING"):
            raise AlloySyntaxError(key.pos, f"expected an object key, got {key.describe()}")
        self.expect_op("=", "after the object key")
        return str(key.value), self.parse_expr()

    def parse_primary(self) -> Expr:
        t = self.next()
        if t.kind in ("NUMBER", "STRING"):
            return Literal(t.value, t.pos)
        if t.kind == "IDENT":
            if t.value in ("true", "false"):
                return Literal(t.value == "true", t.pos)
            if t.value == "null":
                return Literal(None, t.pos)
            return Ident(str(t.value), t.pos)
        if t.is_op("("):
            self._enter(t.pos)
            inner = self.parse_expr()
            self.expect_op(")", "to close the parenthesis")
            self._leave()
            return inner
        if t.is_op("["):
            self._enter(t.pos)
            items = self.parse_list("]", "expression list", self.parse_expr)
            self._leave()
            return self._node(ArrayExpr(items, t.pos), *items)
        if t.is_op("{"):
            self._enter(t.pos)
            fields = self.parse_list("}", "field list", self.parse_field)
            self._leave()
            return self._node(ObjectExpr(fields, t.pos), *(v for _, v in fields))
        raise AlloySyntaxError(t.pos, f"expected an expression, got {t.describe()}")


def parse(text: str, filename: str = "<config>") -> Body:
    """Parse a whole config file; errors carry file:line:column."""
    check_size(len(text.encode("utf-8", "surrogatepass")), filename)
    parser = Parser(iter_tokens(text, filename))
    return parser.parse_body(closing=False)


def check_size(size: int, filename: str) -> None:
    if size > MAX_CONFIG_BYTES:
        raise AlloySyntaxError(None, f"{filename}: {size} bytes is larger than hotstack's limit of a config "
                                 f"({MAX_CONFIG_BYTES >> 20} MiB)")
