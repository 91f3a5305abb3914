"""What the programs' announcements of processes carry (bpf/pids.h announcement_facts): the
kernel offsets they read, set from the kernel's BTF, and how the announcements of one pid add up.
"""

from __future__ import annotations

from .. import ebpf, procs
from ..bpf import schema


def note_announced(pids: dict[int, tuple[bool, procs.Announced | None]], pid: int, kind: int,
                    told: procs.Announced | None = None) -> None:
    """pid -> (exec'ed, what its last record told): an exec announced since the last take stays
    one (its image is read anew)."""
    before = pids.get(pid)
    exec_ed = kind == schema.ANNOUNCE_EXEC or (before is not None and before[0])
    pids[pid] = (exec_ed, told if told is not None or before is None else before[1])


# What an announcement carries (bpf/pids.h announcement_facts): the constants for the offsets it
# reads, and the kernel's BTF names of them. All or none: without one, the record carries none.
_ANNOUNCED_OFFSETS = {
    "task_off_group_leader": ("task_struct", "group_leader"),
    "task_off_start_boottime": ("task_struct", "start_boottime"),
    "task_off_real_parent": ("task_struct", "real_parent"),
    "task_off_tgid": ("task_struct", "tgid"),
    "task_off_comm": ("task_struct", "comm"),
    "task_off_nsproxy": ("task_struct", "nsproxy"),
}
_MOUNT_NAMESPACE_OFFSETS = {
    "nsproxy_off_mnt_ns": ("nsproxy", "mnt_ns"),
    "mnt_ns_off_inum": ("mnt_namespace", "ns.inum"),
}
_EXECUTABLE_OFFSETS = {
    "task_off_mm": ("task_struct", "mm"),
    "mm_off_exe_file": ("mm_struct", "exe_file"),
    "file_off_inode": ("file", "f_inode"),
    "inode_off_ino": ("inode", "i_ino"),
}


def announcement_offsets(spec: ebpf.CollectionSpec) -> None:
    """Set the offsets the programs' announcements read (bpf/pids.h) from the kernel's BTF; none
    where it lacks one of the task's (the records then carry a pid and a kind only)."""
    try:
        btf = ebpf.kernel_btf()
        offsets = {name: btf.member_offset(*where) for name, where in _ANNOUNCED_OFFSETS.items()}
    except (KeyError, OSError, ValueError):
        return
    for optional in (_MOUNT_NAMESPACE_OFFSETS, _EXECUTABLE_OFFSETS):
        try:
            offsets.update({name: btf.member_offset(*where) for name, where in optional.items()})
        except KeyError:
            pass     # (the records then carry no mount namespace, or no executable: /proc is read)
    for name, offset in offsets.items():
        spec.set_constant(name, offset)
