"""How the symbolizer finds and opens the file behind a mapping: the paths tried (the process's
map_files link, a held copy, the path under its root), the elf_cache entry shared by every
process that maps the same bytes, and the symbol sources loaded from it in the seed's order.
"""

from __future__ import annotations

import os
import time

from ..procs import Mapping, ProcessInfo
from .cache_entries import ModuleSymbols, ProcessSymbols, file_identity
from .debugfile import find_debug_file
from .elf import ElfError, ElfFile
from .gopclntab import find_pclntab
from .symtab import SymbolTable

IDENTITY_RECHECK_S = 1.0       # a file's (device, inode) stands for the file opened this long


class ModuleFiles:
    """The part of the Symbolizer (symbolizer.py) that opens mapped files: it uses its elf_cache,
    pid_cache, stats and its maps of file identities (`_keys_by_identity`, `_recent_files`)."""

    def _module(self, info: ProcessInfo, proc: ProcessSymbols, mapping: Mapping) -> ModuleSymbols:
        mkey = (mapping.start, mapping.end, mapping.offset, mapping.inode)
        ekey = proc.modules.get(mkey)
        if ekey is None:
            # A file another process mapped, opened (stat) less than IDENTITY_RECHECK_S ago: the
            # same entry, without the stat of this process's map_files link, which new processes
            # of the same programs (a shell loop's commands) would pay for each file.
            seen = self._recent_files.get((mapping.dev, mapping.inode))
            if seen is not None and time.monotonic() - seen[1] < IDENTITY_RECHECK_S:
                ekey = seen[0]
                proc.modules[mkey] = ekey
                self.pid_cache.resize((info.pid, info.start_time))
        if ekey is not None:
            module = self.elf_cache.get(ekey)
            if module is not None and module.intact(time.monotonic()):
                return module
            if module is not None:     # truncated in place: reading it could kill us (SIGBUS)
                self.elf_cache.pop(ekey)
                self._keys_by_identity = {k: v for k, v in self._keys_by_identity.items() if v != ekey}
                self._recent_files = {k: v for k, v in self._recent_files.items() if v[0] != ekey}
        module, ekey = self._open(info, mapping)
        if module.elf is not None:
            if len(self._recent_files) >= self._max_files * 8:
                self._recent_files.clear()
            self._recent_files[(mapping.dev, mapping.inode)] = (ekey, time.monotonic(), mapping.file_path)
        if proc.modules.get(mkey) != ekey:
            proc.modules[mkey] = ekey
            self.pid_cache.resize((info.pid, info.start_time))
        return module

    def _candidates(self, info: ProcessInfo, mapping: Mapping) -> list[str]:
        path = mapping.file_path
        out = [info.process.map_file(mapping)]
        # (a container's file held open while its process ran: no path opens it once it exited)
        held = self.processes.held_path(mapping)
        if held is not None:
            out.append(held)
        out.append(f"{info.root}{path}" if info.root else path)
        if info.root_is_host:
            out.append(path)
        return out

    def _open(self, info: ProcessInfo, mapping: Mapping) -> tuple[ModuleSymbols, tuple]:
        path = mapping.file_path
        error = "file not found"
        for n, candidate in enumerate(self._candidates(info, mapping)):
            try:
                st = os.stat(candidate)
            except OSError as e:
                error = f"{candidate}: {e.strerror}"
                continue
            if mapping.inode and st.st_ino != mapping.inode:
                # map_files opens what is mapped at those addresses now: another file since the
                # maps were read (a library unloaded, another loaded there); a path, what is there
                # now: another file once the process is gone (a program rebuilt, a package
                # upgraded), whose symbols at those offsets are another program's functions
                error = f"{candidate}: another file is {'mapped' if n == 0 else 'there'} now"
                continue
            identity = file_identity(st)
            known = self._keys_by_identity.get(identity)
            if known is not None:
                module = self.elf_cache.get(known)
                if module is not None:
                    return module, known
            try:
                elf = ElfFile(candidate)
            except ElfError as e:
                error = str(e)
                continue
            if mapping.inode and elf.identity[1] != mapping.inode:
                elf.close()      # (swapped between the stat and the open)
                error = f"{candidate}: another file is {'mapped' if n == 0 else 'there'} now"
                continue
            self.stats.files_opened += 1
            build_id = elf.build_id()
            # A build id names the code, not the file: a stripped copy shares it with the original,
            # and a corrupted or patched copy keeps it too. Files share one entry only when what
            # symbols are read from is the same bytes (size and a hash of those sections).
            try:
                digest = elf.symbol_digest()
            except ElfError as e:
                elf.close()
                error = str(e)
                continue
            ekey = ("build-id", build_id, st.st_size, digest) if build_id else ("file", identity)
            module = self.elf_cache.get(ekey)
            if module is None:
                root = info.root if info.root and not info.root_is_host else ""
                module = self._load(elf, path, build_id, root)
                module.release_pages()       # loading read whole sections (digest, tables)
                module.key = ekey
                self.elf_cache.put(ekey, module)
            else:
                elf.close()
            if len(self._keys_by_identity) >= self._max_files * 8:
                self._keys_by_identity.clear()
            self._keys_by_identity[identity] = ekey
            return module, ekey
        self.stats.file_errors += 1
        module = ModuleSymbols(path, None, None, "", error)
        ekey = ("missing", path, mapping.inode)
        self.elf_cache.put(ekey, module)
        return module, ekey

    def _load(self, elf: ElfFile, path: str, build_id: str, root: str) -> ModuleSymbols:
        """All symbol sources of one file, in the seed's order."""
        module = ModuleSymbols(path, elf, None, build_id)
        sources: list[str] = []
        errors: list[str] = []
        try:
            module.go = find_pclntab(elf) if self.go_symbols else None
            if module.go is not None:
                sources.append(f"gopclntab {module.go.version}")
        except ElfError as e:
            errors.append(str(e))
        debug = None
        try:
            debug, module.refused = find_debug_file(elf, path, root, self.debug_dirs)
        except ElfError as e:
            errors.append(str(e))
        if debug is not None:
            module._debug = debug
            module.debug_file = debug.path
            self.stats.debug_files += 1
            sources.append("debug file")
        try:
            module.table = SymbolTable(elf, debug)
            sources.append("symtab/dynsym")
        except ElfError as e:
            errors.append(str(e))
        module.sources = tuple(sources)
        module.error = "; ".join(errors)
        return module
