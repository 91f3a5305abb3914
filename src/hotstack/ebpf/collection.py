"""Collection: the maps and programs of one object, loaded all-or-nothing."""

from __future__ import annotations

import struct

from . import adapt as adaptmod
from . import memlock
from .errors import EbpfError, VerifierError
from .maps import Map
from .program import Program
from .spec import PSEUDO_MAP_FD, PSEUDO_MAP_VALUE, CollectionSpec, ProgramSpec


class Collection:
    def __init__(self, spec: CollectionSpec, maps: dict[str, Map], programs: dict[str, Program],
                 adaptations: list[adaptmod.Adaptation] | None = None) -> None:
        self.spec = spec
        self.maps = maps
        self.programs = programs
        # What was changed to fit this kernel (adapt.py), for callers that report it.
        self.adaptations = adaptations or []

    @classmethod
    def load(cls, spec: CollectionSpec, existing: dict[str, Map] | None = None,
             defer: frozenset[str] | set[str] = frozenset()) -> "Collection":
        """Create the maps and load the programs. A map named in `existing` (e.g. a pinned map
        another process shares) is used instead of a new one; the collection then owns it.
        Programs named in `defer` are not loaded now (load_deferred() loads one later).

        The spec is first fitted to this kernel (adapt.py: preallocated maps, stubbed helpers), and
        RLIMIT_MEMLOCK raised where the kernel charges BPF memory to it (memlock.py)."""
        spec, adaptations = adaptmod.adapt(spec)
        memlock.ensure([m for key, m in spec.maps.items() if not (existing and key in existing)])
        maps: dict[str, Map] = {}
        programs: dict[str, Program] = {}
        try:
            for key, map_spec in spec.maps.items():
                if existing and key in existing:
                    maps[key] = existing[key]
                    continue
                m = Map.create(map_spec)
                maps[key] = m
                if map_spec.initial is not None and any(map_spec.initial):
                    m.update(b"\0\0\0\0", map_spec.initial)
                if map_spec.freeze:
                    m.freeze()
            for name, prog_spec in spec.programs.items():
                if name not in defer:
                    programs[name] = _load_program(prog_spec, maps)
        except BaseException:
            for p in programs.values():
                p.close()
            for m in maps.values():
                m.close()
            raise
        return cls(spec, maps, programs, adaptations)

    def load_program(self, key: str, prog_spec: ProgramSpec) -> Program:
        """Load one more program against this collection's maps (e.g. a tracing program per target)."""
        if key in self.programs:
            raise EbpfError(f"program {key} is already loaded")
        prog_spec = adaptmod.adapt_program(prog_spec)
        program = _load_program(prog_spec, self.maps)
        self.programs[key] = program
        return program

    def load_deferred(self, name: str) -> Program:
        """A program of this collection's object that load() deferred (loaded once)."""
        program = self.programs.get(name)
        if program is None:
            if name not in self.spec.programs:
                raise EbpfError(f"the object has no program {name}")
            program = self.programs[name] = _load_program(self.spec.programs[name], self.maps)
        return program

    def variable(self, name: str) -> "GlobalVariable":
        var = self.spec.variables[name]
        return GlobalVariable(self.maps[var.map_name], var.offset, var.size)

    def close(self) -> None:
        for p in self.programs.values():
            p.close()
        for m in self.maps.values():
            m.close()

    def __enter__(self) -> "Collection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _load_program(prog_spec: ProgramSpec, maps: dict[str, Map]) -> Program:
    try:
        return Program.load(prog_spec, _relocated(prog_spec, maps))
    except VerifierError as e:
        raise adaptmod.explain_verifier_error(e) from None


def _relocated(prog_spec: ProgramSpec, maps: dict[str, Map]) -> bytes:
    """The program's instructions with map references pointing at the loaded maps."""
    insns = bytearray(prog_spec.instructions)
    for index, map_key, extra in prog_spec.map_relocations:
        if map_key not in maps:
            raise EbpfError(f"program {prog_spec.name} refers to unknown map {map_key}")
        base = index * 8
        insns[base + 1] = (insns[base + 1] & 0x0F) | ((PSEUDO_MAP_FD if extra is None else PSEUDO_MAP_VALUE) << 4)
        struct.pack_into("<i", insns, base + 4, maps[map_key].fd)
        struct.pack_into("<i", insns, base + 12, extra or 0)
    return bytes(insns)


class GlobalVariable:
    """A global in .data/.bss, read and written through its map at run time."""

    def __init__(self, m: Map, offset: int, size: int) -> None:
        self._map, self._offset, self._size = m, offset, size

    def get(self) -> int:
        raw = self._map.lookup(b"\0\0\0\0") or bytes(self._map.value_size)
        return int.from_bytes(raw[self._offset:self._offset + self._size], "little")

    def set(self, value: int) -> None:
        raw = bytearray(self._map.lookup(b"\0\0\0\0") or bytes(self._map.value_size))
        raw[self._offset:self._offset + self._size] = value.to_bytes(self._size, "little")
        self._map.update(b"\0\0\0\0", bytes(raw))
