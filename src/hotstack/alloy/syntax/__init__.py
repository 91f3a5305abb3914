"""Alloy configuration syntax: lexer, parser, values and the expression evaluator."""

from .parser import parse
from .ast import Attribute, Block, Body

__all__ = ["parse", "Attribute", "Block", "Body"]
