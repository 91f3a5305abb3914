"""What the symbolizer tells of itself: its caches' contents for a debug page, its counters for
a metrics endpoint.
"""

from __future__ import annotations

from .cache import ByteLRU
from .cache_entries import ModuleSymbols


class SymbolizerReport:
    """The part of the Symbolizer (symbolizer.py) that describes its caches and counters."""

    def cached_files(self) -> list[ModuleSymbols]:
        return self.elf_cache.values()

    def debug_info(self) -> dict:
        """Plain data for the front doors: the two caches (Alloy's elf_cache / pid_cache) and counters."""
        files = []
        for key, module, size in self.elf_cache.items():
            files.append({"key": f"{key[0]}:{key[1]}" if key[0] == "build-id" else key[0],
                          "path": module.path, "build_id": module.build_id, "symbols": module.symbols,
                          "bytes": size, "sources": list(module.sources), "debug_file": module.debug_file,
                          "error": module.error})
        procs = []
        for (pid, start), proc, size in self.pid_cache.items():
            # As Alloy's pid_cache: the process's ELF symbol tables and their sizes in symbols.
            tables: dict[str, int] = {}
            for ekey in set(proc.modules.values()):
                module = self.elf_cache.peek(ekey)
                if module is not None:
                    tables[module.path] = module.symbols
            procs.append({"pid": pid, "start_time": start, "mappings": len(proc.modules), "bytes": size,
                          "symbols": sum(tables.values()),
                          "symbol_tables": [{"path": k, "symbols": v} for k, v in sorted(tables.items())],
                          "perf_map_symbols": len(proc.perf_map) if proc.perf_map is not None else 0})
        return {
            "demangle": self.demangle,
            "elf_cache": {**self._cache_numbers(self.elf_cache),
                          "symbols": sum(f["symbols"] for f in files), "files": files},
            "pid_cache": {**self._cache_numbers(self.pid_cache), "processes": procs},
            "frames": {"named": self.stats.hits, "unnamed": self.stats.misses, "jit": self.stats.jit_hits},
            "files_opened": self.stats.files_opened, "file_errors": self.stats.file_errors,
            "debug_files": self.stats.debug_files,
        }

    def metrics(self) -> dict[str, int]:
        """Flat counters and gauges (name -> value) for a metrics endpoint."""
        out: dict[str, int] = {}
        for name, cache in (("elf_cache", self.elf_cache), ("pid_cache", self.pid_cache)):
            for k, v in self._cache_numbers(cache).items():
                out[f"{name}_{k}"] = v
        out["frames_named"] = self.stats.hits
        out["frames_unnamed"] = self.stats.misses
        out["frames_jit"] = self.stats.jit_hits
        out["files_opened"] = self.stats.files_opened
        out["file_errors"] = self.stats.file_errors
        return out

    @staticmethod
    def _cache_numbers(cache: ByteLRU) -> dict[str, int]:
        s = cache.stats
        return {"hits": s.hits, "misses": s.misses, "evictions": s.evictions, "bytes": s.bytes,
                "max_bytes": cache.max_bytes, "entries": len(cache)}
