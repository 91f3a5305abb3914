"""The syntax tree: a Body of Attributes and Blocks; expressions as small nodes."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import Pos


class Expr:
    pos: Pos
    depth = 1        # levels of the tree under this node (set by the parser)


@dataclass(eq=False)
class Literal(Expr):
    value: object
    pos: Pos


@dataclass(eq=False)
class ArrayExpr(Expr):
    items: list[Expr]
    pos: Pos


@dataclass(eq=False)
class ObjectExpr(Expr):
    fields: list[tuple[str, Expr]]
    pos: Pos


@dataclass(eq=False)
class Ident(Expr):
    name: str
    pos: Pos


@dataclass(eq=False)
class Access(Expr):
    value: Expr
    name: str
    pos: Pos


@dataclass(eq=False)
class Index(Expr):
    value: Expr
    index: Expr
    pos: Pos


@dataclass(eq=False)
class Call(Expr):
    func: Expr
    args: list[Expr]
    pos: Pos


@dataclass(eq=False)
class Unary(Expr):
    op: str
    value: Expr
    pos: Pos


@dataclass(eq=False)
class Binary(Expr):
    op: str
    left: Expr
    right: Expr
    pos: Pos


@dataclass(eq=False)
class Attribute:
    name: str
    value: Expr
    pos: Pos


@dataclass(eq=False)
class Block:
    name: str                 # dotted, e.g. "discovery.relabel"
    label: str                # "" when the block has none
    body: "Body"
    pos: Pos

    @property
    def id(self) -> str:
        return f"{self.name}.{self.label}" if self.label else self.name


@dataclass(eq=False)
class Body:
    statements: list[Attribute | Block] = field(default_factory=list)

    @property
    def attributes(self) -> list[Attribute]:
        return [s for s in self.statements if isinstance(s, Attribute)]

    @property
    def blocks(self) -> list[Block]:
        return [s for s in self.statements if isinstance(s, Block)]


def references(expr: Expr):
    """Yield every dotted name an expression reads, as (parts, pos): `a.b.c` -> (["a","b","c"], pos)."""
    if isinstance(expr, (Ident, Access)):
        parts: list[str] = []
        node: Expr = expr
        while isinstance(node, Access):
            parts.append(node.name)
            node = node.value
        if isinstance(node, Ident):
            parts.append(node.name)
            yield list(reversed(parts)), node.pos
            return
        yield from references(node)
    elif isinstance(expr, ArrayExpr):
        for item in expr.items:
            yield from references(item)
    elif isinstance(expr, ObjectExpr):
        for _, v in expr.fields:
            yield from references(v)
    elif isinstance(expr, Index):
        yield from references(expr.value)
        yield from references(expr.index)
    elif isinstance(expr, Call):
        yield from references(expr.func)
        for a in expr.args:
            yield from references(a)
    elif isinstance(expr, Unary):
        yield from references(expr.value)
    elif isinstance(expr, Binary):
        yield from references(expr.left)
        yield from references(expr.right)


def body_references(body: Body):
    for s in body.statements:
        if isinstance(s, Attribute):
            yield from references(s.value)
        else:
            yield from body_references(s.body)
