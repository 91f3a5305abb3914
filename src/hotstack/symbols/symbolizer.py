"""The one symbolizer: raw addresses of a process -> Frames.

Kernel addresses resolve through /proc/kallsyms. A user address is mapped to its file through
the process's mappings (read when the process was first seen), to the ELF virtual address
through the file's load segments, and to a function through the sources the seed lists. In its
order: `.gopclntab` (Go), the `.symtab`/`.dynsym` of a separate debug file (found as GDB finds
it), then those of the file itself (plus its PLT stubs). Addresses in anonymous memory resolve
through the process's perf map (JIT code). Files are read through /proc/PID/root so that
processes in containers resolve against their own filesystem.

Two caches, both LRU bounded by bytes, as Alloy's pyroscope.ebpf has them:
  elf_cache  per build id (or file identity without one): the symbol tables of a file, shared by
             every process that maps it;
  pid_cache  per process (pid + start time, so pid reuse is a new entry; started afresh when its
             maps are read again or its executable changes, i.e. after exec): mapping -> elf_cache
             key, the frames already resolved, and its perf map.

What cannot be named follows the seed's rules: process gone, no mapping, or the file is gone
-> `[unknown]`; a file without a symbol for the address -> `module+0xOFF`.
"""

from __future__ import annotations

import operator
import os
import posixpath
import threading
import time
from dataclasses import dataclass

from ..procs import Mapping, ProcessInfo, ProcessTable
from ..procs.maps import MappingIndex, dev_field, kernel_dev_field
from ..profile.model import UNKNOWN, Frame, FrameKind
from .cache import ByteLRU
from .cache_entries import ModuleSymbols, ProcessSymbols, file_frame, file_identity
from .debugfile import DEFAULT_DEBUG_DIRS
from .demangle import Demangler
from .kallsyms import KernelSymbols
from .module_files import IDENTITY_RECHECK_S, ModuleFiles
from .perfmap import PerfMap
from .symbolizer_report import SymbolizerReport
from .vdso import VDSO_PATH, VdsoSymbols

__all__ = ["KERNEL_MODULE", "ModuleSymbols", "ProcessSymbols", "Symbolizer", "SymbolizerStats"]

KERNEL_MODULE = "[kernel.kallsyms]"
DEFAULT_ELF_CACHE_BYTES = 256 << 20
DEFAULT_PID_CACHE_BYTES = 64 << 20
MAX_FRAMES_PER_PROCESS = 100_000
PERF_MAP_RECHECK_S = 0.5       # a perf map is looked at (stat) at most this often per process
EXEC_RECHECK_S = 1.0           # how often a process's executable is checked for exec
MAX_FILE_FRAMES = 16384        # frames remembered by file and offset, for every process (~3 MB)
MAX_KERNEL_FRAMES = 16384      # kernel frames remembered by address
_RESOLVED = operator.attrgetter("resolved")


@dataclass
class SymbolizerStats:
    hits: int = 0            # frames named
    misses: int = 0          # frames left as module+0xOFF or [unknown]
    files_opened: int = 0
    file_errors: int = 0
    debug_files: int = 0
    jit_hits: int = 0


class Symbolizer(ModuleFiles, SymbolizerReport):
    def __init__(self, processes: ProcessTable, kernel: KernelSymbols | None = None,
                 max_files: int = 512, demangle: str = "full",
                 elf_cache_bytes: int = DEFAULT_ELF_CACHE_BYTES,
                 pid_cache_bytes: int = DEFAULT_PID_CACHE_BYTES,
                 debug_dirs: tuple[str, ...] = DEFAULT_DEBUG_DIRS,
                 perf_maps: bool = True, go_symbols: bool = True) -> None:
        self.processes = processes
        self.go_symbols = go_symbols    # False: .gopclntab is not read (Go names only from .symtab)
        self.vdso = VdsoSymbols()       # [vdso] frames, named from the host's image
        self._kernel = kernel
        self._kernel_lock = threading.Lock()
        self._lock = threading.RLock()
        self.demangler = Demangler(demangle)
        self.debug_dirs = tuple(debug_dirs)
        self.perf_maps = perf_maps
        self._max_files = max_files
        self.elf_cache: ByteLRU[ModuleSymbols] = ByteLRU(elf_cache_bytes, lambda m: m.nbytes)
        self.pid_cache: ByteLRU[ProcessSymbols] = ByteLRU(pid_cache_bytes, lambda p: p.nbytes)
        # file identity (stat) -> elf_cache key: a file mapped by many processes is opened once.
        self._keys_by_identity: dict[tuple, tuple] = {}
        # (device, inode) of a mapping -> (elf_cache key, when a stat last tied them, the path shown)
        self._recent_files: dict[tuple, tuple[tuple, float, str]] = {}
        # (file's elf_cache key, path shown, file offset looked up, leaf) -> Frame, for every process:
        # a new process of a known program (a shell loop's commands) names its frames from here,
        # without the per-file lookup (~12-25 us a frame, a new process's every frame)
        self._file_frames: dict[tuple, Frame] = {}
        # kernel address -> Frame: kernel stacks repeat the same few thousand addresses
        self._kernel_frames: dict[int, Frame] = {}
        self._kernel_frames_of: KernelSymbols | None = None
        self.stats = SymbolizerStats()

    @property
    def demangle(self) -> str:
        return self.demangler.mode

    # -- kernel ------------------------------------------------------------------------------
    @property
    def kernel(self) -> KernelSymbols:
        with self._kernel_lock:
            if self._kernel is None:
                self._kernel = KernelSymbols.load()
            return self._kernel

    def kernel_frames(self, addresses: list[int]) -> list[Frame]:
        kernel = self.kernel
        with self._kernel_lock:
            if self._kernel_frames_of is not kernel or len(self._kernel_frames) >= MAX_KERNEL_FRAMES:
                self._kernel_frames = {}
                self._kernel_frames_of = kernel
            known = self._kernel_frames
        # a leaf and a return address are looked up differently (below): keyed apart
        keys = [a * 2 for a in addresses]
        if keys:
            keys[0] += 1
        frames = list(map(known.get, keys))
        if all(frames):
            return frames
        missing = [i for i, f in enumerate(frames) if f is None]
        # Non-leaf addresses are return addresses: look up the call instruction (addr - 1).
        lookups = [addresses[i] if i == 0 or addresses[i] == 0 else addresses[i] - 1 for i in missing]
        for i, name in zip(missing, kernel.lookup_many(lookups)):
            frame = Frame(name or UNKNOWN, FrameKind.KERNEL, KERNEL_MODULE, addresses[i], resolved=name is not None)
            frames[i] = known[keys[i]] = frame
        return frames

    # -- user --------------------------------------------------------------------------------
    def user_frames(self, pid: int, addresses: list[int]) -> list[Frame]:
        with self._lock:
            return self._user_frames(pid, addresses)[0]

    def final_user_frames(self, pid: int, addresses: list[int], info: ProcessInfo | None = None
                          ) -> tuple[list[Frame], bool]:
        """(user_frames, final): final when every frame is named as it will stay, i.e. none is
        `[unknown]` (no mapping, no file, JIT code whose perf map may name it later). `info`: the
        process as the addresses were sampled in (default: as the process table has it now)."""
        with self._lock:
            return self._user_frames(pid, addresses, info)

    def _user_frames(self, pid: int, addresses: list[int], info: ProcessInfo | None = None
                     ) -> tuple[list[Frame], bool]:
        info = self.processes.get(pid) if info is None else info
        if info is None:
            self.stats.misses += len(addresses)
            return [Frame(UNKNOWN, address=a, resolved=False) for a in addresses], not addresses
        if info.lazy:
            self.processes.settle(info)     # (noted, not read: its mappings now, before its cache entry)
        proc = self._process(info)
        # Profiles repeat the same return addresses: a process remembers the frames of its files.
        # Most stacks of a running process are made of frames met before: one C-level pass over
        # the keys (the leaf's is odd: its address is not a return address) names them at once.
        if not addresses:
            return [], True
        known = proc.frames
        keys = [a * 2 for a in addresses]
        keys[0] += 1
        frames: list[Frame | None] = list(map(known.get, keys))
        # (only final frames are remembered in `known`: a stack made of them is final)
        if all(frames):     # (a Frame is always true: `None not in` would call Frame.__eq__ per frame)
            return self._counted(frames), True
        if frames[0] is None and all(frames[1:]):
            leaf = self._leaf_frame(info, proc, addresses[0])
            if leaf is not None:
                frames[0] = leaf
                return self._counted(frames), True
        final = True
        # Group by module so that each file answers one batch lookup.
        per_module: dict[tuple[int, str], tuple[ModuleSymbols, list[int], list[int]]] = {}
        jit: list[tuple[int, int]] = []
        file_frames = self._file_frames
        if len(file_frames) >= MAX_FILE_FRAMES:
            file_frames.clear()
        for i, address in enumerate(addresses):
            if frames[i] is not None:
                continue
            mapping = self.processes.find_mapping(info, address)
            lookup = address if i == 0 or address == 0 else address - 1
            if mapping is not None and mapping.path == VDSO_PATH:
                found = self.vdso.lookup(lookup - mapping.start)
                if found is not None:
                    frames[i] = Frame(found[0], FrameKind.NATIVE, VDSO_PATH, address)
                    continue
            if mapping is None or not mapping.is_file:
                if self.perf_maps and (mapping is None or not mapping.path.startswith("[")
                                       or mapping.path in ("[anon]", "[heap]")):
                    jit.append((i, lookup))
                frames[i] = Frame(UNKNOWN, address=address, module=mapping.path if mapping else "",
                                  resolved=False)
                final = False
                continue
            file_offset = lookup - mapping.start + mapping.offset
            path = mapping.file_path
            shared, module, fkey = self._shared_file_frame(info, proc, mapping, path, file_offset, i == 0)
            if shared is not None:
                frames[i] = shared
                if len(known) < MAX_FRAMES_PER_PROCESS:
                    known[keys[i]] = shared
                continue
            vaddr = module.elf.file_offset_to_vaddr(file_offset) if module.elf is not None else None
            if module.elf is None or vaddr is None:
                frames[i] = Frame(UNKNOWN, module=path, address=file_offset, resolved=False)
                final = False
                continue
            # The same file may be mapped under other paths (containers): frames show this one.
            entry = per_module.setdefault((id(module), path), (module, [], [], []))
            entry[1].append(i)
            entry[2].append(vaddr)
            entry[3].append(fkey)
        for (_, path), (module, indexes, vaddrs, fkeys) in per_module.items():
            results = module.resolve(vaddrs, self.demangler)
            self._weigh(module)
            for i, vaddr, found, fkey in zip(indexes, vaddrs, results, fkeys):
                # Report the frame's own address (undo the -1 applied for the lookup).
                frames[i] = file_frame(module, path, vaddr + (1 if i else 0), found)
                if len(known) < MAX_FRAMES_PER_PROCESS:
                    known[keys[i]] = frames[i]
                if fkey is not None:
                    file_frames[fkey] = frames[i]
        if len(known) - proc.accounted >= 1024:
            proc.accounted = len(known)
            self.pid_cache.resize((info.pid, info.start_time))
        if jit:
            self._jit_frames(info, proc, jit, addresses, frames)
        return self._counted([f for f in frames if f is not None]), final

    def _weigh(self, module: ModuleSymbols) -> None:
        """The elf_cache weighs a file again after every 1024 addresses it remembered."""
        if len(module._results) - module._accounted >= 1024:
            module._accounted = len(module._results)
            self.elf_cache.resize(module.key)

    def _shared_file_frame(self, info: ProcessInfo, proc: ProcessSymbols, mapping: Mapping, path: str, file_offset: int,
                    leaf: bool) -> tuple[Frame | None, ModuleSymbols | None, tuple | None]:
        """(the frame any process met at this offset of the mapping's file, or None; the module,
        where it had to be opened to look (None where the process's own key found the frame); the
        key a frame named now is remembered under, None for a file without one). Through the file's
        key this process met before, without its module; else through the module's key."""
        ekey = proc.modules.get((mapping.start, mapping.end, mapping.offset, mapping.inode))
        shared = self._file_frames.get((ekey, path, file_offset, leaf)) if ekey else None
        if shared is not None:
            return shared, None, None
        module = self._module(info, proc, mapping)
        fkey = (module.key, path, file_offset, leaf) if module.key else None
        if fkey is not None and fkey[0] != ekey:
            shared = self._file_frames.get(fkey)
        return shared, module, fkey

    def _leaf_frame(self, info: ProcessInfo, proc: ProcessSymbols, address: int) -> Frame | None:
        """The leaf's frame where it is the one address of a stack not named in this process
        before (a hot function's every instruction is a leaf in turn, each a new stack above frames
        named long ago), named as the general pass would and remembered as it does. None where that
        pass is needed (no file, no symbols, JIT code)."""
        mapping = self.processes.find_mapping(info, address)
        if mapping is None or not mapping.is_file:
            return None
        file_offset = address - mapping.start + mapping.offset
        path = mapping.file_path
        frame, module, fkey = self._shared_file_frame(info, proc, mapping, path, file_offset, True)
        if frame is None:
            if fkey is None:
                return None
            frame = self._named_leaf(module, path, file_offset, fkey)
            if frame is None:
                return None
        known = proc.frames
        if len(known) < MAX_FRAMES_PER_PROCESS:
            known[address * 2 + 1] = frame
            if len(known) - proc.accounted >= 1024:
                proc.accounted = len(known)
                self.pid_cache.resize((info.pid, info.start_time))
        return frame

    def file_leaf_frame(self, inode: int, dev: int, file_offset: int) -> Frame | None:
        """The frame of a leaf at `file_offset` of the file the kernel knows as (inode, device: its
        dev_t, major << 20 | minor), with no process's mappings. It is named as a process's
        leaf there would be (the same frame, shared), where a process's mapping of that very file was opened
        before (its path still holds that file: checked by a stat once IDENTITY_RECHECK_S passed);
        else None (a process's mappings name it)."""
        with self._lock:
            files_key = (kernel_dev_field(dev), inode)
            seen = self._recent_files.get(files_key)
            now = time.monotonic()
            if seen is None or not seen[0]:
                return None
            ekey, checked_at, path = seen
            if now - checked_at >= IDENTITY_RECHECK_S:
                # the file at the path shown is still the one opened (a stat, as _open makes)
                try:
                    st = os.stat(path)
                except OSError:
                    return None
                if ((dev_field(os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino) != files_key
                        or self._keys_by_identity.get(file_identity(st)) != ekey):
                    return None
                self._recent_files[files_key] = (ekey, now, path)
            fkey = (ekey, path, file_offset, True)
            frame = self._file_frames.get(fkey)
            if frame is None:
                module = self.elf_cache.get(ekey)
                if module is None or not module.intact(now):
                    return None
                frame = self._named_leaf(module, path, file_offset, fkey)
                if frame is None:
                    return None
            return self._counted([frame])[0]

    def _named_leaf(self, module: ModuleSymbols, path: str, file_offset: int, fkey: tuple) -> Frame | None:
        """A leaf's frame at `file_offset` of `module` (shown at `path`), looked up in the file and
        remembered for every process under `fkey`; None if the file has no symbols or no such offset."""
        if module.elf is None:
            return None
        vaddr = module.elf.file_offset_to_vaddr(file_offset)
        if vaddr is None:
            return None
        frame = file_frame(module, path, vaddr, module.resolve([vaddr], self.demangler)[0])
        self._weigh(module)
        if len(self._file_frames) >= MAX_FILE_FRAMES:
            self._file_frames.clear()
        self._file_frames[fkey] = frame
        return frame

    def _counted(self, frames: list[Frame]) -> list[Frame]:
        """`frames`, counted in the stats as named or not."""
        named = sum(map(_RESOLVED, frames))     # (one C-level pass, not a generator per frame)
        self.stats.hits += named
        self.stats.misses += len(frames) - named
        return frames

    def release_file_pages(self) -> None:
        """After a round of lookups: the files' pages leave our resident set (see
        ElfFile.release_pages); the next round faults in what it reads again."""
        with self._lock:
            for module in self.elf_cache.values():
                module.release_pages()

    def _jit_frames(self, info: ProcessInfo, proc: ProcessSymbols, jit: list[tuple[int, int]],
                    addresses: list[int], frames: list[Frame | None]) -> None:
        if proc.perf_map is None:
            root = info.root if info.root and not info.root_is_host else ""
            proc.perf_map = PerfMap(f"{root}/tmp/perf-{info.process.namespace_pid()}.map")
        pm = proc.perf_map
        before = pm.loads
        if not pm.refresh(PERF_MAP_RECHECK_S):
            return
        if pm.loads != before:
            self.pid_cache.resize((info.pid, info.start_time))
        names = pm.lookup_many([lookup for _, lookup in jit])
        for (i, _), name in zip(jit, names):
            if name is not None:
                self.stats.jit_hits += 1
                frames[i] = Frame(name, FrameKind.JIT, posixpath.basename(pm.path), addresses[i])

    def _process(self, info: ProcessInfo) -> ProcessSymbols:
        key = (info.pid, info.start_time)
        proc = self.pid_cache.get(key)
        now = time.monotonic()
        if proc is not None and info.alive and now - proc.exe_checked_at >= EXEC_RECHECK_S:
            proc.exe_checked_at = now
            exe = info.process.image()
            if exe is not None and proc.exe is not None and exe != proc.exe:
                # exec keeps the pid and its start time: only the executable tells. Its maps are
                # read again (as the process table does on a miss) and everything cached goes.
                fresh = info.process.exec_maps()
                if fresh:
                    info.mappings = MappingIndex(fresh)
                    info.image = exe
        if proc is None or proc.mappings is not info.mappings:
            # New process, a reused pid, or maps read again (exec, dlopen): start afresh.
            proc = self.pid_cache.put(key, ProcessSymbols(info.pid, info.start_time, info.mappings))
            # the image the process table read with these maps (a stat less; adopted: gone)
            proc.exe = info.image if info.image is not None else info.process.image()
            proc.exe_checked_at = now
        return proc

