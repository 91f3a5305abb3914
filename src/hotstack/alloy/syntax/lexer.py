"""Tokens of Alloy syntax, each with its position and whether a newline came before it.

Statements end at newlines; the parser asks a token's `newline_before` instead of the
lexer inserting terminator tokens, which keeps the grammar small.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import Pos, AlloySyntaxError

# Longest operators first so that `==` is not read as `=` `=`.
OPERATORS = ("==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "^", "!", "<", ">", "=",
             "(", ")", "[", "]", "{", "}", ",", ".")

# Numbers are ASCII digits (as in Alloy); str.isdigit() would also take '²' and fail int().
_DIGITS = frozenset("0123456789")
_TWO_CHAR_OPS = {op for op in OPERATORS if len(op) == 2}
_ONE_CHAR_OPS = {op for op in OPERATORS if len(op) == 1}
# Runs matched at once (a config of megabytes must not be read one character per Python call).
_BLANKS = re.compile(r"[ \t\r\n]+")
_IDENT_REST = re.compile(r"\w*")
_STRING_RUN = re.compile(r'[^"\\\n]+')

_SIMPLE_ESCAPES = {"\\": "\\", "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", '"': '"'}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str          # IDENT, STRING, NUMBER, OP, EOF
    value: object      # identifier text, decoded string, number, or the operator
    pos: Pos
    newline_before: bool

    def is_op(self, op: str) -> bool:
        return self.kind == "OP" and self.value == op

    def describe(self) -> str:
        if self.kind == "EOF":
            return "end of file"
        if self.kind == "STRING":
            return "string literal"
        return repr(str(self.value)) if self.kind != "NUMBER" else f"number {self.value}"


def _is_ident_start(c: str) -> bool:
    return c == "_" or c.isalpha()


def _is_ident_char(c: str) -> bool:
    return c == "_" or c.isalnum()


class Lexer:
    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.i = 0
        self.line = 1
        self.col = 1

    def pos(self) -> Pos:
        return Pos(self.filename, self.line, self.col)

    def _advance(self, n: int = 1) -> None:
        start, end = self.i, self.i + n
        newlines = self.text.count("\n", start, end)
        if newlines:
            self.line += newlines
            self.col = end - self.text.rfind("\n", start, end)
        else:
            self.col += n
        self.i = end

    def tokens(self) -> list[Token]:
        return list(self.iter_tokens())

    def iter_tokens(self) -> Iterator[Token]:
        """Tokens as the parser asks for them: an error deep in a huge file is found without
        reading the rest first."""
        newline = False
        text = self.text
        while True:
            # whitespace and comments
            while self.i < len(text):
                c = text[self.i]
                if c in " \t\r\n":
                    m = _BLANKS.match(text, self.i)
                    newline = newline or "\n" in m.group()
                    self._advance(m.end() - self.i)
                elif text.startswith("//", self.i):
                    end = text.find("\n", self.i)
                    self._advance((len(text) if end < 0 else end) - self.i)
                elif text.startswith("/*", self.i):
                    start = self.pos()
                    end = text.find("*/", self.i + 2)
                    if end < 0:
                        raise AlloySyntaxError(start, "comment not terminated")
                    if "\n" in text[self.i:end]:
                        newline = True
                    self._advance(end + 2 - self.i)
                elif c == "#":
                    raise AlloySyntaxError(self.pos(), "illegal character '#' (comments start with // or /*)")
                else:
                    break
            pos = self.pos()
            if self.i >= len(text):
                yield Token("EOF", None, pos, True)
                return
            c = text[self.i]
            if _is_ident_start(c):
                j = self.i + 1
                while True:    # \w is Unicode letters, digits and '_', as str.isalnum() (bar a few)
                    j = _IDENT_REST.match(text, j).end()
                    if j < len(text) and _is_ident_char(text[j]):
                        j += 1
                        continue
                    break
                word = text[self.i:j]
                self._advance(j - self.i)
                yield Token("IDENT", word, pos, newline)
            elif c in _DIGITS:
                yield Token("NUMBER", self._number(pos), pos, newline)
            elif c == '"':
                yield Token("STRING", self._string(pos), pos, newline)
            elif c == "`":
                end = text.find("`", self.i + 1)
                if end < 0:
                    raise AlloySyntaxError(pos, "raw string literal not terminated")
                value = text[self.i + 1:end]
                self._advance(end + 1 - self.i)
                yield Token("STRING", value, pos, newline)
            else:
                op = text[self.i:self.i + 2]
                if op not in _TWO_CHAR_OPS:
                    op = c
                    if op not in _ONE_CHAR_OPS:
                        raise AlloySyntaxError(pos, f"illegal character {c!r}")
                self._advance(len(op))
                yield Token("OP", op, pos, newline)
            newline = False

    def _number(self, pos: Pos) -> int | float:
        text, j = self.text, self.i
        while j < len(text) and text[j] in _DIGITS:
            j += 1
        is_float = False
        if j < len(text) and text[j] == "." and j + 1 < len(text) and text[j + 1] in _DIGITS:
            is_float = True
            j += 1
            while j < len(text) and text[j] in _DIGITS:
                j += 1
        if j < len(text) and text[j] in "eE":
            k = j + 1
            if k < len(text) and text[k] in "+-":
                k += 1
            if k < len(text) and text[k] in _DIGITS:
                is_float = True
                j = k
                while j < len(text) and text[j] in _DIGITS:
                    j += 1
            else:
                raise AlloySyntaxError(pos, "exponent has no digits")
        literal = text[self.i:j]
        self._advance(j - self.i)
        return float(literal) if is_float else int(literal)

    def _string(self, pos: Pos) -> str:
        text = self.text
        self._advance()  # opening quote
        out: list[str] = []
        while True:
            if self.i >= len(text) or text[self.i] == "\n":
                raise AlloySyntaxError(pos, "string literal not terminated")
            c = text[self.i]
            if c == '"':
                self._advance()
                return "".join(out)
            if c != "\\":
                run = _STRING_RUN.match(text, self.i).group()
                out.append(run)
                self._advance(len(run))
                continue
            esc_pos = self.pos()
            self._advance()
            if self.i >= len(text):
                raise AlloySyntaxError(esc_pos, "escape sequence not terminated")
            e = text[self.i]
            if e in _SIMPLE_ESCAPES:
                out.append(_SIMPLE_ESCAPES[e])
                self._advance()
            elif e in "01234567":
                digits = text[self.i:self.i + 3]
                if len(digits) < 3 or any(d not in "01234567" for d in digits):
                    raise AlloySyntaxError(esc_pos, "invalid octal escape")
                out.append(chr(int(digits, 8)))
                self._advance(3)
            elif e in "xuU":
                n = {"x": 2, "u": 4, "U": 8}[e]
                digits = text[self.i + 1:self.i + 1 + n]
                if len(digits) < n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise AlloySyntaxError(esc_pos, f"invalid \\{e} escape")
                code = int(digits, 16)
                if code > 0x10FFFF or 0xD800 <= code < 0xE000:
                    raise AlloySyntaxError(esc_pos, "escape is an invalid Unicode code point")
                out.append(chr(code))
                self._advance(n + 1)
            else:
                raise AlloySyntaxError(esc_pos, f"unknown escape sequence \\{e}")


def tokenize(text: str, filename: str = "<config>") -> list[Token]:
    return Lexer(text, filename).tokens()


def iter_tokens(text: str, filename: str = "<config>") -> Iterator[Token]:
    return Lexer(text, filename).iter_tokens()
