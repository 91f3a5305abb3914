"""The gadgets `hotstack run` knows: a gadget registers a function that takes the parsed flags
and returns the exit code. Kept apart from cli.py so that gadgets never import the CLI."""

from __future__ import annotations

import argparse
from typing import Callable

GadgetRunner = Callable[[argparse.Namespace], int]
GADGETS: dict[str, GadgetRunner] = {}


def register(name: str) -> Callable[[GadgetRunner], GadgetRunner]:
    def add(runner: GadgetRunner) -> GadgetRunner:
        GADGETS[name] = runner
        return runner
    return add
