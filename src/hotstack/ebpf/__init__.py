"""A small pure-Python eBPF loader: ELF object -> maps and programs; perf events.

It knows nothing of profiling. A `CollectionSpec` is read from an object once
(`load_spec`), tunables are set with `set_constant`, and `Collection.load`
creates the maps and loads the programs, all or nothing.
"""

from .btf import Btf, kernel_btf, release_kernel_btf
from .collection import Collection, GlobalVariable
from .errors import EbpfError, ObjectFormatError, SyscallError, VerifierError
from .maps import MAP_TYPE_HASH, Map, online_cpus, possible_cpus
from .perf import PerfEvent, open_cpu_clock_events
from .program import Program, ProgramStats, enable_run_time_stats
from .spec import CollectionSpec, MapSpec, ProgramSpec, load_spec

__all__ = [
    "Btf", "kernel_btf", "release_kernel_btf", "Collection", "GlobalVariable", "EbpfError", "ObjectFormatError",
    "SyscallError", "VerifierError", "Map", "MAP_TYPE_HASH", "online_cpus", "possible_cpus", "PerfEvent", "open_cpu_clock_events", "Program",
    "ProgramStats", "enable_run_time_stats", "CollectionSpec", "MapSpec", "ProgramSpec", "load_spec",
]
