"""/proc: process identity, memory mappings, cgroups and container ids. The only reader of /proc
for processes: every other layer asks a Process or these functions."""

from .containers import container_id_from_cgroup
from .maps import Mapping, MappingIndex, parse_maps, read_maps
from .process import (Announced, Process, ProcessInfo, ProcessTable, all_pids, credentials, exe_file_path, exe_identity, exe_path, exec_paths, exists, map_file_at, map_file_path, mapped_file_path,
                      mount_namespace, namespace_pid, own_host_pid, parent_pid,
                      announced, process_labels, ProcessLabels, read_exec_maps, read_maps_text, read_process, read_start_time, root_path)

__all__ = ["Announced", "announced", "container_id_from_cgroup", "credentials", "Mapping", "MappingIndex", "parse_maps", "read_maps", "Process", "ProcessInfo",
           "ProcessTable", "all_pids", "exe_file_path", "exe_identity", "exe_path", "exec_paths", "exists", "map_file_at", "map_file_path", "mapped_file_path", "mount_namespace", "namespace_pid", "own_host_pid", "parent_pid", "process_labels", "ProcessLabels", "read_exec_maps", "read_maps_text", "read_process",
           "read_start_time", "root_path"]
