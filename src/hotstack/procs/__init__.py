"""/proc: process identity, memory mappings, cgroups and container ids."""

from .containers import container_id_from_cgroup
from .maps import Mapping, parse_maps, read_maps
from .process import ProcessInfo, ProcessTable, read_process

__all__ = ["container_id_from_cgroup", "Mapping", "parse_maps", "read_maps", "ProcessInfo", "ProcessTable",
           "read_process"]
