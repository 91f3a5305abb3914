"""/proc: process identity, memory mappings and memory, cgroups and container ids. The only reader of
/proc for processes: every other layer asks a Process (process.py: a live one, or one recorded
into a directory, recorded.py), the ProcessTable's ProcessInfo entries, or these functions."""

from .containers import container_id_from_cgroup
from .identity import (Announced, all_pids, announced, credentials, exe_file_path, exe_identity, exists,
                       mount_namespace, namespace_pid, own_host_pid, parent_pid, read_start_time, read_stat)
from .info import ProcessInfo, read_process
from .labels import ProcessLabels, process_labels
from .mapped import (exe_path, exec_paths, map_file_at, map_file_path, mapped_file_path, read_exec_maps,
                     read_maps_text, root_path)
from .maps import Mapping, MappingIndex, parse_maps, read_maps
from .memory import MemoryReadError, PagedMemory
from .process import LiveProcess, Process, as_process
from .system import (KALLSYMS, KERNEL_CONFIG, descriptor_path, is_proc_path, is_under_process_root, mounts,
                     own_status, sysctl)
from .table import ProcessTable



def __getattr__(name: str):
    """RecordedProcess and record (recorded.py) are imported when first asked for: only `doctor
    --record` and tests use them, and their pathlib costs every run ~2 MB of memory."""
    if name in ("RecordedProcess", "record"):
        from . import recorded
        return getattr(recorded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["KALLSYMS", "KERNEL_CONFIG", "descriptor_path", "is_proc_path", "is_under_process_root", "mounts",
           "own_status", "sysctl", "Announced", "announced", "container_id_from_cgroup", "credentials", "Mapping", "MappingIndex", "parse_maps",
           "read_maps", "LiveProcess", "as_process", "MemoryReadError", "PagedMemory", "Process", "ProcessInfo", "RecordedProcess", "record", "ProcessTable", "all_pids", "exe_file_path", "exe_identity", "exe_path",
           "exec_paths", "exists", "map_file_at", "map_file_path", "mapped_file_path", "mount_namespace", "namespace_pid",
           "own_host_pid", "parent_pid", "process_labels", "ProcessLabels", "read_exec_maps", "read_maps_text",
           "read_process", "read_start_time", "read_stat", "root_path"]
