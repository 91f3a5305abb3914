"""Map: a loaded BPF map and the operations on it (lookup, update, delete, batch)."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
import threading
from typing import Iterator

from . import syscalls as sc
from .errors import SyscallError
from .spec import MapSpec

BPF_NOEXIST = 1
BPF_ANY = 0
BPF_F_MMAPABLE = 1 << 10
MAP_TYPE_HASH = 1
MAP_TYPE_ARRAY = 2

# Map types whose values are per CPU: the kernel reads and writes one value per possible CPU.
_PERCPU_TYPES = {5, 6, 10}  # PERCPU_HASH, PERCPU_ARRAY, LRU_PERCPU_HASH


def possible_cpus() -> int:
    """Number of possible CPUs (per-CPU map values have this many slots)."""
    with open("/sys/devices/system/cpu/possible") as f:
        return _count_cpu_list(f.read())


def online_cpus() -> list[int]:
    with open("/sys/devices/system/cpu/online") as f:
        return _cpu_list(f.read())


def _cpu_list(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def _count_cpu_list(text: str) -> int:
    cpus = _cpu_list(text)
    return max(cpus) + 1 if cpus else 1


class _Scratch:
    """The key and value buffers of batch reads, shared by every map (one batch at a time: the
    syscall is short). Buffers of its own would make a batch read allocate and zero ~120 KiB for
    its values, and copy all of it out, at every call: most of the cost of a call that finds a few
    elements or none (the pid watcher and the naming passes make several a second)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()     # a batch that grows (ENOSPC) asks again under the lock
        self._keys = self._values = ctypes.create_string_buffer(0)

    KEEP_BYTES = 256 << 10     # a larger batch (one that grew on ENOSPC) gets buffers of its own

    def buffers(self, key_bytes: int, value_bytes: int):
        if key_bytes + value_bytes > self.KEEP_BYTES:
            return ctypes.create_string_buffer(key_bytes), ctypes.create_string_buffer(value_bytes)
        if len(self._keys) < key_bytes:
            self._keys = ctypes.create_string_buffer(key_bytes)
        if len(self._values) < value_bytes:
            self._values = ctypes.create_string_buffer(value_bytes)
        return self._keys, self._values


_scratch = _Scratch()


class Map:
    def __init__(self, spec: MapSpec, fd: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.fd = fd
        self.key_size = spec.key_size
        self.value_size = spec.value_size
        self.percpu = spec.type in _PERCPU_TYPES
        # Per-CPU values are rounded up to 8 bytes per CPU.
        self._ncpu = possible_cpus() if self.percpu else 1
        self._slot = (spec.value_size + 7) & ~7 if self.percpu else spec.value_size
        self.buffer_value_size = self._slot * self._ncpu

    @classmethod
    def create(cls, spec: MapSpec) -> "Map":
        attr = sc.new_attr()
        struct.pack_into("<IIIII", attr, 0, spec.type, spec.key_size, spec.value_size, spec.max_entries, spec.flags)
        name = spec.name.encode()[:15]
        ctypes.memmove(ctypes.addressof(attr) + 28, name, len(name))
        fd = sc.bpf(sc.BPF_MAP_CREATE, attr, f"create map {spec.name}")
        return cls(spec, fd)

    def mmap(self, offset: int = 0, length: int | None = None) -> mmap.mmap:
        """Values of an array map created with BPF_F_MMAPABLE (5.5+), shared with the programs,
        from byte `offset` (a multiple of the page size) for `length` bytes (default: to the end).
        Writing them is a memory copy, where an update (batched or not) costs a syscall's worth of
        work per element in the kernel. The kernel maps every page at once: map what you write."""
        if self.spec.type != MAP_TYPE_ARRAY or self.percpu:
            raise ValueError(f"map {self.name}: only array maps can be mapped")
        size = ((self.value_size + 7) & ~7) * self.spec.max_entries
        size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        if offset % mmap.PAGESIZE or not 0 <= offset < size:
            raise ValueError(f"map {self.name}: offset {offset} is not a page of the map")
        length = size - offset if length is None else min(length, size - offset)
        try:
            return mmap.mmap(self.fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        except OSError as e:
            raise SyscallError.from_errno(f"mmap of map {self.name}", e.errno) from None

    def close(self) -> None:
        if self.fd >= 0:
            sc.close(self.fd)
            self.fd = -1

    # -- single elements -------------------------------------------------------------------
    def _elem_attr(self, key: bytes, value_buf, flags: int = 0):
        attr = sc.new_attr()
        kbuf = ctypes.create_string_buffer(key, len(key))
        struct.pack_into("<IIQQQ", attr, 0, self.fd, 0, sc.address(kbuf), sc.address(value_buf), flags)
        return attr, kbuf

    def _elem_command(self, cmd: int, key: bytes, value_buf, what: str) -> bool:
        """A command on the element at `key`; False if the map has none (ENOENT). `what`: the
        command, as an error names it ("lookup in")."""
        attr, _k = self._elem_attr(key, value_buf)
        err = sc.bpf_errno(cmd, attr)
        if err == errno.ENOENT:
            return False
        if err:
            raise SyscallError.from_errno(f"{what} map {self.name}", err)
        return True

    def lookup(self, key: bytes) -> bytes | None:
        value = ctypes.create_string_buffer(self.buffer_value_size)
        return value.raw if self._elem_command(sc.BPF_MAP_LOOKUP_ELEM, key, value, "lookup in") else None

    def lookup_percpu(self, key: bytes) -> list[bytes]:
        raw = self.lookup(key)
        if raw is None:
            return []
        return [raw[i * self._slot:i * self._slot + self.value_size] for i in range(self._ncpu)]

    def percpu_u64_sums(self) -> list[int]:
        """A per-CPU array of u64 counters, each index summed over the CPUs, read in one batch (a
        lookup a counter would be ~30 syscalls at every collect for the samplers' and the
        unwinder's counters)."""
        sums = [0] * self.spec.max_entries
        slot_words = self._slot // 8
        for key, value in self.items(self.spec.max_entries):
            index, = struct.unpack_from("<I", key)
            if index < len(sums):
                sums[index] = sum(struct.unpack(f"<{self._ncpu * slot_words}Q", value)[::slot_words])
        return sums

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        if self.percpu and len(value) == self.value_size:
            value = value.ljust(self._slot, b"\0") * self._ncpu
        vbuf = ctypes.create_string_buffer(value, len(value))
        attr, _k = self._elem_attr(key, vbuf, flags)
        sc.bpf(sc.BPF_MAP_UPDATE_ELEM, attr, f"update map {self.name}")

    def delete(self, key: bytes) -> bool:
        return self._elem_command(sc.BPF_MAP_DELETE_ELEM, key, None, "delete from")

    def keys(self) -> Iterator[bytes]:
        """All keys, by BPF_MAP_GET_NEXT_KEY (works on every map type and kernel)."""
        prev: bytes | None = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            attr = sc.new_attr()
            kbuf = ctypes.create_string_buffer(prev, len(prev)) if prev is not None else None
            struct.pack_into("<IIQQ", attr, 0, self.fd, 0, sc.address(kbuf), sc.address(nxt))
            err = sc.bpf_errno(sc.BPF_MAP_GET_NEXT_KEY, attr)
            if err == errno.ENOENT:
                return
            if err:
                raise SyscallError.from_errno(f"iterate map {self.name}", err)
            prev = nxt.raw
            yield prev

    def any_key(self) -> bool:
        """Whether the map holds an element (one BPF_MAP_GET_NEXT_KEY)."""
        return next(self.keys(), None) is not None

    def freeze(self) -> None:
        attr = sc.new_attr()
        struct.pack_into("<I", attr, 0, self.fd)
        sc.bpf(sc.BPF_MAP_FREEZE, attr, f"freeze map {self.name}")

    # -- batches -----------------------------------------------------------------------------
    def update_batch(self, keys: bytes, values: bytes, count: int, flags: int = BPF_ANY) -> None:
        """Write `count` elements in one call (BPF_MAP_UPDATE_BATCH, 5.6+; element by element before)."""
        ks, vs = self.key_size, self.buffer_value_size
        if len(keys) != ks * count or len(values) != vs * count:
            raise ValueError(f"update_batch of {self.name}: {count} elements need {ks * count}+{vs * count} bytes")
        done = 0
        kbuf = ctypes.create_string_buffer(keys, len(keys))
        vbuf = ctypes.create_string_buffer(values, len(values))
        while done < count:
            attr = sc.new_attr()
            struct.pack_into("<QQQQIIQ", attr, 0, 0, 0, sc.address(kbuf) + ks * done, sc.address(vbuf) + vs * done,
                             count - done, self.fd, flags)
            err = sc.bpf_errno(sc.BPF_MAP_UPDATE_BATCH, attr)
            written, = struct.unpack_from("<I", attr, 32)
            if err in (errno.EINVAL, errno.ENOTSUP, 524) and written == 0:
                for i in range(done, count):
                    self.update(keys[i * ks:(i + 1) * ks], values[i * vs:(i + 1) * vs], flags)
                return
            if err:
                raise SyscallError.from_errno(f"batch update of map {self.name}", err)
            done += written
            if written == 0:
                raise SyscallError.from_errno(f"batch update of map {self.name}", errno.EIO)


    def delete_batch(self, keys: list[bytes]) -> int:
        """Delete these keys in one call (BPF_MAP_DELETE_BATCH, 5.6+; key by key before); a key
        already gone is skipped. Returns how many were deleted."""
        ks = self.key_size
        deleted, done = 0, 0
        kbuf = ctypes.create_string_buffer(b"".join(keys), ks * len(keys))
        while done < len(keys):
            attr = sc.new_attr()
            struct.pack_into("<QQQQII", attr, 0, 0, 0, sc.address(kbuf) + ks * done, 0, len(keys) - done, self.fd)
            err = sc.bpf_errno(sc.BPF_MAP_DELETE_BATCH, attr)
            count, = struct.unpack_from("<I", attr, 32)
            if err in (errno.EINVAL, errno.ENOTSUP, 524) and count == 0:
                return deleted + sum(self.delete(k) for k in keys[done:])
            deleted += count
            done += count
            if err == errno.ENOENT:
                done += 1           # keys[done] was gone already: go on after it
            elif err:
                raise SyscallError.from_errno(f"batch delete from map {self.name}", err)
        return deleted

    def drain(self, batch: int = 256) -> list[tuple[bytes, bytes]]:
        """Read and delete every entry (BPF_MAP_LOOKUP_AND_DELETE_BATCH).

        Falls back to key iteration + lookup + delete on kernels without batch ops.
        """
        try:
            return self._batch(sc.BPF_MAP_LOOKUP_AND_DELETE_BATCH, batch)
        except SyscallError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTSUP, 524):  # 524 = ENOTSUPP
                raise
        items = []
        for key in list(self.keys()):
            value = self.lookup(key)
            if value is not None:
                items.append((key, value))
            self.delete(key)
        return items

    def items(self, batch: int = 256) -> list[tuple[bytes, bytes]]:
        try:
            return self._batch(sc.BPF_MAP_LOOKUP_BATCH, batch)
        except SyscallError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTSUP, 524):
                raise
        return [(k, v) for k in list(self.keys()) if (v := self.lookup(k)) is not None]

    def _batch(self, cmd: int, batch: int) -> list[tuple[bytes, bytes]]:
        with _scratch.lock:
            return self._batch_into(cmd, batch, *_scratch.buffers(self.key_size * batch, self.buffer_value_size * batch))

    def _batch_into(self, cmd: int, batch: int, keys, values) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        ks, vs = self.key_size, self.buffer_value_size
        # Hash maps use a bucket index as the batch cursor; 8 bytes covers every map type.
        in_batch = ctypes.create_string_buffer(max(ks, 8))
        out_batch = ctypes.create_string_buffer(max(ks, 8))
        first = True
        while True:
            attr = sc.new_attr()
            struct.pack_into("<QQQQII", attr, 0, 0 if first else sc.address(in_batch), sc.address(out_batch),
                             sc.address(keys), sc.address(values), batch, self.fd)
            err = sc.bpf_errno(cmd, attr)
            count, = struct.unpack_from("<I", attr, 32)
            if err not in (0, errno.ENOENT):
                if err == errno.ENOSPC and batch < 1 << 16:   # one bucket holds more than `batch`
                    return out + self._batch(cmd, batch * 4) if cmd == sc.BPF_MAP_LOOKUP_AND_DELETE_BATCH \
                        else self._batch(cmd, batch * 4)
                raise SyscallError.from_errno(f"batch read of map {self.name}", err)
            # only what the kernel wrote is copied out (the buffers are ~120 KiB, reused)
            kraw, vraw = ctypes.string_at(keys, count * ks), ctypes.string_at(values, count * vs)
            for i in range(count):
                out.append((kraw[i * ks:(i + 1) * ks], vraw[i * vs:(i + 1) * vs]))
            if err == errno.ENOENT:
                return out
            ctypes.memmove(in_batch, out_batch, len(out_batch))
            first = False

    def __repr__(self) -> str:
        return f"Map({self.name!r}, fd={self.fd})"


def unpack_percpu_u64(raw: bytes, ncpu: int) -> int:
    """Sum of a per-CPU u64 value."""
    return sum(struct.unpack_from("<Q", raw, i * 8)[0] for i in range(ncpu))


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
