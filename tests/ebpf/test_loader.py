"""The pure-Python loader against the real kernel: maps, globals, programs, BTF, verifier errors."""

from __future__ import annotations

import struct
import subprocess

import pytest

from hotstack import ebpf
from hotstack.ebpf.spec import MapSpec, ProgramSpec
from hotstack.bpf import object_path as _object_path, schema


def object_path() -> str:
    return _object_path("profile")


def configured_spec() -> ebpf.CollectionSpec:
    """The sampling object as the engine loads it on this kernel: the kernel unwinder's constants
    set from this kernel's BTF (left at zero, it would be the path for kernels without a VMA
    tree, which the kernel matrix loads on the kernels that take it: tests/kernels)."""
    from hotstack.unwind import kernel_config

    spec = ebpf.load_spec(object_path(), map_prefix="hstest")
    kernel_config.configure(spec)
    return spec


from ..peers import require_tool

pytestmark = pytest.mark.root

HASH, ARRAY, PERCPU_ARRAY = 1, 2, 6


def test_spec_reads_maps_globals_and_programs():
    spec = ebpf.load_spec(object_path())
    assert "profile_cpu" in spec.programs
    assert spec.programs["profile_cpu"].prog_type == 7   # BPF_PROG_TYPE_PERF_EVENT
    counts = spec.maps["counts_0"]
    assert (counts.type, counts.key_size, counts.value_size) == (HASH, schema.STACK_KEY.size,
                                                                 schema.STACK_COUNT.size)
    assert spec.maps["user_stacks_0"].value_size == 127 * 8
    assert spec.maps[".rodata"].freeze and spec.maps[".rodata"].flags & (1 << 7)
    assert {"filter_by_pid", "include_idle", "active_buffer"} <= set(spec.variables)


def test_set_constant_writes_rodata_bytes():
    spec = ebpf.load_spec(object_path())
    spec.set_constant("include_idle", 1)
    var = spec.variables["include_idle"]
    data = spec.maps[".rodata"].initial
    assert struct.unpack_from("<I", data, var.offset)[0] == 1
    with pytest.raises(KeyError):
        spec.set_constant("no_such_variable", 1)


def test_hash_map_operations_and_batch_drain():
    m = ebpf.Map.create(MapSpec("hs_test_hash", HASH, 4, 8, 4096))
    try:
        for i in range(1000):
            m.update(struct.pack("<I", i), struct.pack("<Q", i * 3))
        assert m.lookup(struct.pack("<I", 7)) == struct.pack("<Q", 21)
        assert m.lookup(struct.pack("<I", 5000)) is None
        assert m.delete(struct.pack("<I", 7)) and not m.delete(struct.pack("<I", 7))
        assert len(list(m.keys())) == 999
        items = m.drain(batch=64)   # several batches, then the map is empty
        assert len(items) == 999
        assert {struct.unpack("<I", k)[0]: struct.unpack("<Q", v)[0] for k, v in items}[999] == 2997
        assert list(m.keys()) == []
    finally:
        m.close()


def test_batch_delete_skips_keys_already_gone():
    m = ebpf.Map.create(MapSpec("hs_test_hdel", HASH, 4, 8, 4096))
    try:
        for i in range(300):
            m.update(struct.pack("<I", i), struct.pack("<Q", i))
        m.delete(struct.pack("<I", 100))           # gone before the batch: skipped, the rest go
        deleted = m.delete_batch([struct.pack("<I", i) for i in range(250)])
        assert deleted == 249
        assert sorted(struct.unpack("<I", k)[0] for k in m.keys()) == list(range(250, 300))
        assert m.delete_batch([]) == 0
    finally:
        m.close()


def test_percpu_values_are_one_per_possible_cpu():
    m = ebpf.Map.create(MapSpec("hs_test_pcpu", PERCPU_ARRAY, 4, 8, 2))
    try:
        m.update(struct.pack("<I", 1), struct.pack("<Q", 5))
        values = m.lookup_percpu(struct.pack("<I", 1))
        assert len(values) == ebpf.possible_cpus()
        assert all(struct.unpack("<Q", v)[0] == 5 for v in values)
    finally:
        m.close()


def test_percpu_counters_are_summed_in_one_batch():
    ncpu = ebpf.possible_cpus()
    m = ebpf.Map.create(MapSpec("hs_test_psum", PERCPU_ARRAY, 4, 8, 5))
    try:
        for index in (0, 3):
            m.update(struct.pack("<I", index), b"".join(struct.pack("<Q", 100 * index + cpu + 1) for cpu in range(ncpu)))
        expected = [0] * 5
        for index in (0, 3):
            expected[index] = sum(100 * index + cpu + 1 for cpu in range(ncpu))
        assert m.percpu_u64_sums() == expected
    finally:
        m.close()


def test_collection_loads_and_global_variable_roundtrip():
    with ebpf.Collection.load(configured_spec()) as c:
        var = c.variable("active_buffer")
        assert var.get() == 0
        var.set(1)
        assert var.get() == 1
        # .rodata is frozen: userspace can no longer write it.
        with pytest.raises(ebpf.SyscallError):
            c.maps[".rodata"].update(b"\0\0\0\0", bytes(c.maps[".rodata"].value_size))


def test_verifier_rejection_carries_the_log():
    # r0 = *(u64 *)(r1 + 100000): an out-of-bounds context read the verifier must refuse.
    insns = struct.pack("<BBhi", 0x79, 0x01, 32000, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    spec = ProgramSpec("hs_bad", "perf_event", 7, 0, bytearray(insns))
    with pytest.raises(ebpf.VerifierError) as info:
        ebpf.Program.load(spec, insns)
    assert "invalid bpf_context access" in info.value.log or "R1" in info.value.log
    assert info.value.log_tail().strip()


def test_object_format_errors():
    with pytest.raises(ebpf.ObjectFormatError):
        ebpf.load_spec(b"not an elf at all" * 10)
    with open("/bin/true", "rb") as f:   # an x86-64 ELF, not BPF
        with pytest.raises(ebpf.ObjectFormatError):
            ebpf.load_spec(f.read())


def test_kernel_btf_offsets_match_bpftool():
    require_tool("bpftool")
    btf = ebpf.kernel_btf()
    offset = btf.member_offset("task_struct", "thread.fsbase")
    dump = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "raw"],
                          capture_output=True, text=True, check=True).stdout
    # Find `STRUCT 'thread_struct'` and its fsbase member's bit offset; and task_struct.thread.
    def member_bits(struct_name: str, member: str) -> int:
        lines = dump.splitlines()
        start = next(i for i, l in enumerate(lines) if f"STRUCT '{struct_name}' size=" in l)
        for line in lines[start + 1:]:
            if not line.startswith("\t"):
                break
            if line.strip().startswith(f"'{member}' "):
                return int(line.split("bits_offset=")[1].split()[0])
        raise AssertionError(member)
    expected = (member_bits("task_struct", "thread") + member_bits("thread_struct", "fsbase")) // 8
    assert offset == expected


def test_perf_events_on_every_online_cpu():
    with ebpf.Collection.load(configured_spec()) as c:
        events = ebpf.open_cpu_clock_events(19, c.programs["profile_cpu"])
        try:
            assert sorted(e.cpu for e in events) == ebpf.online_cpus()
        finally:
            for e in events:
                e.close()


def test_load_survives_signals_during_verification():
    """The verifier stops with EAGAIN when a signal arrives (a child exits, the terminal is resized,
    a tracer attaches): the loader tries again instead of failing the start."""
    import signal
    import threading
    import time

    main = threading.main_thread().ident
    stop = threading.Event()
    sent = 0

    def pester() -> None:
        nonlocal sent
        while not stop.is_set():
            signal.pthread_kill(main, signal.SIGUSR2)
            sent += 1
            time.sleep(0.1)

    previous = signal.signal(signal.SIGUSR2, lambda *_: None)
    thread = threading.Thread(target=pester, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        with ebpf.Collection.load(configured_spec()) as c:
            assert c.programs
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGUSR2, previous)
    assert sent >= 2, f"the load took {time.monotonic() - started:.2f} s: too short to be interrupted"


def test_kernel_btf_index_cache_is_used_and_checked(tmp_path):
    """The kernel BTF's type index is kept on disk between starts; a damaged file is not trusted."""
    from hotstack.ebpf.btf import Btf

    fresh = Btf.from_file("/sys/kernel/btf/vmlinux")            # no cache: indexed in Python
    cached_first = Btf.from_file("/sys/kernel/btf/vmlinux", str(tmp_path))
    (index,) = list(tmp_path.iterdir())
    cached = Btf.from_file("/sys/kernel/btf/vmlinux", str(tmp_path))
    names = ("task_struct", "mm"), ("mm_struct", "mm_mt"), ("vm_area_struct", "vm_start")
    for btf in (cached_first, cached):
        assert len(btf) == len(fresh)
        for struct_name, member in names:
            assert btf.member_offset(struct_name, member) == fresh.member_offset(struct_name, member)
    raw = bytearray(index.read_bytes())
    raw[8:12] = (int.from_bytes(raw[8:12], "little") + 4).to_bytes(4, "little")   # shift one entry
    index.write_bytes(bytes(raw))
    damaged = Btf.from_file("/sys/kernel/btf/vmlinux", str(tmp_path))
    assert damaged.member_offset("task_struct", "mm") == fresh.member_offset("task_struct", "mm")
    assert index.read_bytes() != bytes(raw)          # indexed again and rewritten


def test_kernel_btf_structs_match_bpftool():
    """Every struct and union of the kernel's BTF, decoded in place, as bpftool prints it: id,
    name, size, and each member's name, type and bit offset."""
    require_tool("bpftool")
    from hotstack.ebpf.btf import KIND_STRUCT, KIND_UNION

    dump = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "raw"],
                          capture_output=True, text=True, check=True).stdout
    btf = ebpf.kernel_btf()
    checked = 0
    current = None
    expected_members: list[tuple[str, int, int]] = []

    def check() -> None:
        nonlocal checked
        if current is None:
            return
        type_id, kind, name, size = current
        t = btf.type(type_id)
        assert (t.kind, t.name, t.size_or_type) == (kind, name, size), type_id
        assert [(m.name, m.type_id, m.bit_offset) for m in t.extra] == expected_members, type_id
        checked += 1

    for line in dump.splitlines():
        if line.startswith("["):
            check()
            head = line.split()
            current = None
            if head[1] in ("STRUCT", "UNION"):
                name = head[2].strip("'")
                size = int(next(w for w in head if w.startswith("size=")).split("=")[1])
                current = (int(head[0].strip("[]")), KIND_STRUCT if head[1] == "STRUCT" else KIND_UNION,
                           "" if name == "(anon)" else name, size)
                expected_members = []
        elif current is not None and line.startswith("\t'"):
            name, rest = line.strip()[1:].split("' ", 1)
            fields = dict(w.split("=") for w in rest.split())
            expected_members.append(("" if name == "(anon)" else name, int(fields["type_id"]),
                                     int(fields["bits_offset"])))
    check()
    assert checked > 1000
    assert btf.find("task_struct", KIND_STRUCT).name == "task_struct"


def test_kernel_btf_released_and_read_again():
    first = ebpf.kernel_btf()
    assert ebpf.kernel_btf() is first
    offset = first.member_offset("task_struct", "mm")
    ebpf.release_kernel_btf()
    again = ebpf.kernel_btf()
    assert again is not first and again.member_offset("task_struct", "mm") == offset
