"""Importing this package registers every component hotstack implements."""

from . import discovery_docker, discovery_dockerswarm, discovery_kubernetes, discovery_process, discovery_relabel  # noqa: F401,E501
from . import local_store, pyroscope_ebpf, pyroscope_write  # noqa: F401
