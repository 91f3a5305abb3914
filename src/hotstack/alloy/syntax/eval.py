"""Evaluate expressions against a scope (stdlib + the exports of other components)."""

from __future__ import annotations

from .ast import Access, ArrayExpr, Binary, Call, Expr, Ident, Index, Literal, ObjectExpr, Unary
from .errors import AlloySyntaxError
from .stdlib import CallError
from .values import Function, type_name


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Evaluator:
    def __init__(self, scope: dict) -> None:
        self.scope = scope

    def eval(self, expr: Expr) -> object:
        method = getattr(self, "_" + type(expr).__name__)
        return method(expr)

    def _Literal(self, e: Literal) -> object:
        return e.value

    def _ArrayExpr(self, e: ArrayExpr) -> list:
        return [self.eval(i) for i in e.items]

    def _ObjectExpr(self, e: ObjectExpr) -> dict:
        return {k: self.eval(v) for k, v in e.fields}

    def _Ident(self, e: Ident) -> object:
        if e.name not in self.scope:
            raise AlloySyntaxError(e.pos, f"identifier {e.name!r} does not exist")
        return self.scope[e.name]

    def _Access(self, e: Access) -> object:
        value = self.eval(e.value)
        if isinstance(value, dict):
            if e.name not in value:
                raise AlloySyntaxError(e.pos, f"field {e.name!r} does not exist")
            return value[e.name]
        raise AlloySyntaxError(e.pos, f"cannot access field {e.name!r} on a value of type {type_name(value)}")

    def _Index(self, e: Index) -> object:
        value, index = self.eval(e.value), self.eval(e.index)
        if isinstance(value, list):
            if not _number(index) or int(index) != index:
                raise AlloySyntaxError(e.index.pos, f"array index must be a whole number, got {type_name(index)}")
            if not 0 <= int(index) < len(value):
                raise AlloySyntaxError(e.index.pos, f"index {int(index)} is out of range (array of {len(value)})")
            return value[int(index)]
        if isinstance(value, dict):
            if not isinstance(index, str):
                raise AlloySyntaxError(e.index.pos, f"object key must be a string, got {type_name(index)}")
            return value.get(index)
        raise AlloySyntaxError(e.pos, f"cannot index a value of type {type_name(value)}")

    def _Call(self, e: Call) -> object:
        fn = self.eval(e.func)
        if not isinstance(fn, Function):
            raise AlloySyntaxError(e.pos, f"cannot call a value of type {type_name(fn)}")
        args = [self.eval(a) for a in e.args]
        if len(args) < fn.min_args or (fn.max_args is not None and len(args) > fn.max_args):
            want = str(fn.min_args) if fn.max_args == fn.min_args else f"at least {fn.min_args}"
            raise AlloySyntaxError(e.pos, f"{fn.name}: expected {want} argument(s), got {len(args)}")
        try:
            return fn.call(*args)
        except CallError as err:
            raise AlloySyntaxError(e.pos, str(err)) from None

    def _Unary(self, e: Unary) -> object:
        v = self.eval(e.value)
        if e.op == "!":
            if not isinstance(v, bool):
                raise AlloySyntaxError(e.pos, f"'!' needs a bool, got {type_name(v)}")
            return not v
        if not _number(v):
            raise AlloySyntaxError(e.pos, f"'-' needs a number, got {type_name(v)}")
        return -v

    def _Binary(self, e: Binary) -> object:
        op = e.op
        left = self.eval(e.left)
        if op in ("&&", "||"):
            if not isinstance(left, bool):
                raise AlloySyntaxError(e.pos, f"{op!r} needs bools, got {type_name(left)}")
            if (op == "&&" and not left) or (op == "||" and left):
                return left
            right = self.eval(e.right)
            if not isinstance(right, bool):
                raise AlloySyntaxError(e.pos, f"{op!r} needs bools, got {type_name(right)}")
            return right
        right = self.eval(e.right)
        if op == "==":
            return left == right
        if op == "!=":
            return left != right
        if op == "+" and isinstance(left, str) and isinstance(right, str):
            return left + right
        if op in ("<", "<=", ">", ">=") and isinstance(left, str) and isinstance(right, str):
            pass
        elif not (_number(left) and _number(right)):
            raise AlloySyntaxError(e.pos, f"{op!r} cannot combine {type_name(left)} and {type_name(right)}")
        if op == "+":
            return left + right
        if op == "-":
            return left - right
        if op == "*":
            return left * right
        if op in ("/", "%"):
            if right == 0:
                raise AlloySyntaxError(e.pos, "division by zero")
            if op == "%":
                return left % right
            q = left / right
            return int(q) if isinstance(left, int) and isinstance(right, int) and q.is_integer() else q
        if op == "^":
            return left ** right
        return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]
