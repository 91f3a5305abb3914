"""The one symbolizer: raw addresses of a process -> Frames.

Kernel addresses resolve through /proc/kallsyms. A user address is mapped to
its file through the process's mappings (read when the process was first seen),
to the ELF virtual address through the file's load segments, and to a function
through the file's symbol tables. Files are read through /proc/PID/root so that
processes in containers resolve against their own filesystem.

What cannot be named follows the seed's rules: no mapping, or the file is gone
-> `[unknown]`; a file without a symbol for the address -> `module+0xOFF`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..procs import Mapping, ProcessInfo, ProcessTable
from ..profile.model import UNKNOWN, Frame, FrameKind
from .elf import ElfError, ElfFile
from .kallsyms import KernelSymbols
from .symtab import SymbolTable

KERNEL_MODULE = "[kernel.kallsyms]"


@dataclass
class ModuleSymbols:
    """What we know of one mapped file."""

    path: str
    elf: ElfFile | None
    table: SymbolTable | None
    build_id: str
    error: str = ""

    @property
    def nbytes(self) -> int:
        return self.table.nbytes if self.table is not None else 0


@dataclass
class SymbolizerStats:
    hits: int = 0
    misses: int = 0
    files_opened: int = 0
    file_errors: int = 0


class Symbolizer:
    def __init__(self, processes: ProcessTable, kernel: KernelSymbols | None = None,
                 max_files: int = 512) -> None:
        self.processes = processes
        self._kernel = kernel
        self._kernel_lock = threading.Lock()
        self._files: OrderedDict[tuple, ModuleSymbols] = OrderedDict()
        self._max_files = max_files
        self.stats = SymbolizerStats()

    # -- kernel ------------------------------------------------------------------------------
    @property
    def kernel(self) -> KernelSymbols:
        with self._kernel_lock:
            if self._kernel is None:
                self._kernel = KernelSymbols.load()
            return self._kernel

    def kernel_frames(self, addresses: list[int]) -> list[Frame]:
        # Non-leaf addresses are return addresses: look up the call instruction (addr - 1).
        lookups = [a if i == 0 else a - 1 for i, a in enumerate(addresses)]
        names = self.kernel.lookup_many(lookups)
        return [Frame(name or UNKNOWN, FrameKind.KERNEL, KERNEL_MODULE, addr, resolved=name is not None)
                for addr, name in zip(addresses, names)]

    # -- user --------------------------------------------------------------------------------
    def user_frames(self, pid: int, addresses: list[int]) -> list[Frame]:
        info = self.processes.get(pid)
        if info is None:
            return [Frame(UNKNOWN, address=a, resolved=False) for a in addresses]
        # Group by module so that each file answers one batch lookup.
        per_module: dict[tuple, tuple[ModuleSymbols, list[int], list[int]]] = {}
        frames: list[Frame | None] = [None] * len(addresses)
        for i, address in enumerate(addresses):
            mapping = self.processes.find_mapping(info, address)
            if mapping is None or not mapping.is_file:
                frames[i] = Frame(UNKNOWN, address=address, module=mapping.path if mapping else "",
                                  resolved=False)
                continue
            module = self._module(info, mapping)
            lookup = address if i == 0 else address - 1
            file_offset = lookup - mapping.start + mapping.offset
            vaddr = module.elf.file_offset_to_vaddr(file_offset) if module.elf is not None else None
            if module.elf is None or vaddr is None:
                frames[i] = Frame(UNKNOWN, module=mapping.file_path, address=file_offset, resolved=False)
                continue
            entry = per_module.setdefault(id(module), (module, [], []))
            entry[1].append(i)
            entry[2].append(vaddr)
        for module, indexes, vaddrs in per_module.values():
            results = module.table.lookup_many(vaddrs) if module.table is not None else [None] * len(vaddrs)
            base = os.path.basename(module.path)
            for i, vaddr, found in zip(indexes, vaddrs, results):
                # Report the frame's own address (undo the -1 applied for the lookup).
                address = vaddr + (1 if i else 0)
                if found is None:
                    self.stats.misses += 1
                    frames[i] = Frame(f"{base}+0x{address:x}", FrameKind.NATIVE, module.path, address,
                                      module.build_id, resolved=False)
                else:
                    self.stats.hits += 1
                    frames[i] = Frame(found[0], FrameKind.NATIVE, module.path, address, module.build_id)
        return [f for f in frames if f is not None]

    def _module(self, info: ProcessInfo, mapping: Mapping) -> ModuleSymbols:
        key = (mapping.dev, mapping.inode, mapping.file_path)
        cached = self._files.get(key)
        if cached is not None:
            self._files.move_to_end(key)
            return cached
        module = self._open(info, mapping)
        self._files[key] = module
        while len(self._files) > self._max_files:
            _, old = self._files.popitem(last=False)
            if old.elf is not None:
                old.elf.close()
        return module

    def _open(self, info: ProcessInfo, mapping: Mapping) -> ModuleSymbols:
        path = mapping.file_path
        candidates = [f"/proc/{info.pid}/map_files/{mapping.start:x}-{mapping.end:x}",
                      f"{info.root}{path}" if info.root else path]
        if info.root_is_host:
            candidates.append(path)
        error = "file not found"
        for candidate in candidates:
            try:
                elf = ElfFile(candidate)
            except ElfError as e:
                error = str(e)
                continue
            self.stats.files_opened += 1
            try:
                table = SymbolTable(elf)
            except ElfError as e:
                table, error = None, str(e)
            return ModuleSymbols(path, elf, table, elf.build_id(), error)
        self.stats.file_errors += 1
        return ModuleSymbols(path, None, None, "", error)

    def cached_files(self) -> list[ModuleSymbols]:
        return list(self._files.values())
