"""Names of containers, from the container runtimes' own APIs (as Inspektor Gadget names them).

The container id of a process comes from its cgroup (procs/containers.py); this package turns
that id into names: the runtime's container name and image, and the Kubernetes namespace, pod
and container names that the runtime keeps in the container's labels (kubelet sets them on
every container it creates, through CRI or dockershim). Lookups are cached.

    from hotstack.containers import container_metadata
    meta = container_metadata(container_id)      # ContainerMetadata or None
"""

from .lookup import RUNTIME_NAMES, ContainerRuntimes, container_metadata, default_runtimes, named_runtimes, use_runtimes
from .model import ContainerMetadata, RuntimeUnavailable

__all__ = ["ContainerMetadata", "ContainerRuntimes", "RUNTIME_NAMES", "RuntimeUnavailable", "container_metadata",
           "default_runtimes", "named_runtimes", "use_runtimes"]
