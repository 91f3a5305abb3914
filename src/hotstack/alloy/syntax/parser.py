"""Recursive-descent parser of Alloy syntax into the tree of `ast.py`.

Grammar (by precedence, low to high): `||`, `&&`, comparisons, `+ -`, `* / %`, `^`
(right-assoc), unary `! -`, then postfix `.field`, `[index]`, `(call)`.
"""

from __future__ import annotations

from .ast import (Access, ArrayExpr, Attribute, Binary, Block, Body, Call, Expr, Ident, Index, Literal,
                  ObjectExpr, Unary)
from .errors import SyntaxError_
from .lexer import Token, tokenize

_BINARY_LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))


def _is_identifier(text: str) -> bool:
    return bool(text) and (text[0] == "_" or text[0].isalpha()) and all(c == "_" or c.isalnum() for c in text)


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        t = self.tokens[self.i]
        if t.kind != "EOF":
            self.i += 1
        return t

    def expect_op(self, op: str, context: str = "") -> Token:
        t = self.tok
        if not t.is_op(op):
            where = f" {context}" if context else ""
            raise SyntaxError_(t.pos, f"expected {op!r}{where}, got {t.describe()}")
        return self.next()

    # -- statements ------------------------------------------------------------------------
    def parse_body(self, closing: bool) -> Body:
        body = Body()
        first = True
        while True:
            t = self.tok
            if t.kind == "EOF":
                if closing:
                    raise SyntaxError_(t.pos, "expected '}' to close the block, got end of file")
                return body
            if closing and t.is_op("}"):
                return body
            if not first and not t.newline_before:
                raise SyntaxError_(t.pos, f"expected a newline before {t.describe()}")
            body.statements.append(self.parse_statement())
            first = False

    def parse_statement(self) -> Attribute | Block:
        t = self.next()
        if t.kind != "IDENT":
            raise SyntaxError_(t.pos, f"expected an attribute or block name, got {t.describe()}")
        if self.tok.is_op("="):
            self.next()
            return Attribute(str(t.value), self.parse_expr(), t.pos)
        parts = [str(t.value)]
        while self.tok.is_op("."):
            self.next()
            part = self.next()
            if part.kind != "IDENT":
                raise SyntaxError_(part.pos, f"expected an identifier after '.', got {part.describe()}")
            parts.append(str(part.value))
        label = ""
        if self.tok.kind == "STRING":
            lt = self.next()
            label = str(lt.value)
            if not _is_identifier(label):
                raise SyntaxError_(lt.pos, f"block label {label!r} must be a valid identifier "
                                           "(letters, digits and underscores, not starting with a digit)")
        elif self.tok.kind == "IDENT" and len(parts) > 1:
            raise SyntaxError_(self.tok.pos, "block labels must be double-quoted strings")
        if not self.tok.is_op("{"):
            what = "'=' or '{'" if len(parts) == 1 and not label else "'{'"
            raise SyntaxError_(self.tok.pos, f"expected {what} after {'.'.join(parts)}, got {self.tok.describe()}")
        self.next()
        body = self.parse_body(closing=True)
        self.expect_op("}")
        return Block(".".join(parts), label, body, t.pos)

    # -- expressions -----------------------------------------------------------------------
    def parse_expr(self, level: int = 0) -> Expr:
        if level == len(_BINARY_LEVELS):
            return self.parse_power()
        left = self.parse_expr(level + 1)
        while self.tok.kind == "OP" and self.tok.value in _BINARY_LEVELS[level]:
            op = self.next()
            right = self.parse_expr(level + 1)
            left = Binary(str(op.value), left, right, op.pos)
        return left

    def parse_power(self) -> Expr:
        left = self.parse_unary()
        if self.tok.is_op("^"):
            op = self.next()
            return Binary("^", left, self.parse_power(), op.pos)   # right-associative
        return left

    def parse_unary(self) -> Expr:
        if self.tok.is_op("!") or self.tok.is_op("-"):
            op = self.next()
            return Unary(str(op.value), self.parse_unary(), op.pos)
        return self.parse_postfix(self.parse_primary())

    def parse_postfix(self, expr: Expr) -> Expr:
        while True:
            t = self.tok
            if t.is_op("."):
                self.next()
                name = self.next()
                if name.kind != "IDENT":
                    raise SyntaxError_(name.pos, f"expected a field name after '.', got {name.describe()}")
                expr = Access(expr, str(name.value), name.pos)
            elif t.is_op("[") and not t.newline_before:
                self.next()
                index = self.parse_expr()
                self.expect_op("]", "to close the index")
                expr = Index(expr, index, t.pos)
            elif t.is_op("(") and not t.newline_before:
                self.next()
                args = self.parse_list(")", "argument list", self.parse_expr)
                expr = Call(expr, args, t.pos)
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
                    raise SyntaxError_(self.tok.pos, f"missing ',' in {what} (a comma is needed after the last "
                                                     f"element when {closing!r} is on a new line)")
                self.next()
                return items
            raise SyntaxError_(self.tok.pos, f"expected ',' or {closing!r} in {what}, got {self.tok.describe()}")

    def parse_field(self) -> tuple[str, Expr]:
        key = self.next()
        if key.kind not in ("IDENT", "STRING"):
            raise SyntaxError_(key.pos, f"expected an object key, got {key.describe()}")
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
            inner = self.parse_expr()
            self.expect_op(")", "to close the parenthesis")
            return inner
        if t.is_op("["):
            return ArrayExpr(self.parse_list("]", "expression list", self.parse_expr), t.pos)
        if t.is_op("{"):
            return ObjectExpr(self.parse_list("}", "field list", self.parse_field), t.pos)
        raise SyntaxError_(t.pos, f"expected an expression, got {t.describe()}")


def parse(text: str, filename: str = "<config>") -> Body:
    """Parse a whole config file; errors carry file:line:column."""
    parser = Parser(tokenize(text, filename))
    return parser.parse_body(closing=False)
