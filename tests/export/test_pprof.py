"""pprof output, checked by Go's own reader (`go tool pprof -raw` and `-top`)."""

from __future__ import annotations

import gzip

import pytest

from hotstack.profile.model import Frame, FrameKind, Profile, Sample
from hotstack.profile.pprof import encode_pprof

from ..conftest import hotstack
from .conftest import pprof
from .pprof_raw import parse_raw

HZ = 99
PERIOD = 1_000_000_000 // HZ


def _profile() -> Profile:
    k = Frame("do_syscall_64", FrameKind.KERNEL, "[kernel.kallsyms]", 0xffffffff81001000)
    leaf = Frame("spin", FrameKind.NATIVE, "/opt/app/bin/app", 0x1139, "ab" * 20)
    main = Frame("main", FrameKind.NATIVE, "/opt/app/bin/app", 0x1160, "ab" * 20, file="app.c", line=42)
    lib = Frame("memcpy", FrameKind.NATIVE, "/lib/libc.so.6", 0x9a000, "cd" * 20)
    return Profile(samples=[
        Sample((k, leaf, main), 7, 100, 100, "app", (("container_id", "c0ffee"),)),
        Sample((leaf, main), 5, 100, 101, "app"),
        Sample((lib, main), 3, 200, 200, "other"),
    ], start_ns=1_700_000_000_000_000_000, duration_ns=2_000_000_000, frequency_hz=HZ)


@pytest.mark.parametrize("compress", [True, False])
def test_encoded_profile_reads_back_exactly(go_pprof, tmp_path, compress):
    data = encode_pprof(_profile(), compress=compress)
    assert (data[:2] == b"\x1f\x8b") == compress
    path = tmp_path / "p.pb"
    path.write_bytes(data)
    raw = parse_raw(pprof(go_pprof, "-raw", str(path)))
    assert raw.period_type == "cpu nanoseconds"
    assert raw.period == PERIOD
    assert raw.sample_types == ["cpu/nanoseconds"]
    got = sorted((raw.stack(s), s["values"][0], s["labels"]) for s in raw.samples)
    assert got == sorted([
        (["do_syscall_64", "spin", "main"], 7 * PERIOD, {"comm": "app", "pid": "100", "container_id": "c0ffee"}),
        (["spin", "main"], 5 * PERIOD, {"comm": "app", "pid": "100"}),
        (["memcpy", "main"], 3 * PERIOD, {"comm": "other", "pid": "200"}),
    ])
    addresses = {loc["functions"][0]: loc["address"] for loc in raw.locations.values()}
    assert addresses["spin"] == 0x1139 and addresses["do_syscall_64"] == 0xffffffff81001000
    mappings = " | ".join(raw.mappings.values())
    assert "/opt/app/bin/app " + "ab" * 20 in mappings and "[kernel.kallsyms]" in mappings


def test_top_ranks_functions_by_cpu_time(go_pprof, tmp_path):
    path = tmp_path / "p.pb.gz"
    path.write_bytes(encode_pprof(_profile()))
    top = pprof(go_pprof, "-top", str(path))
    assert "Type: cpu" in top
    flat = [line.split()[-1] for line in top.splitlines() if line.strip().endswith(("spin", "memcpy", "do_syscall_64"))]
    assert flat == ["do_syscall_64", "spin", "memcpy"], top   # 7, 5, 3 samples


def test_comm_and_pid_labels_can_be_left_out(go_pprof, tmp_path):
    path = tmp_path / "p.pb.gz"
    path.write_bytes(encode_pprof(_profile(), comm_label=False, pid_label=False))
    raw = parse_raw(pprof(go_pprof, "-raw", str(path)))
    assert all(set(s["labels"]) <= {"container_id"} for s in raw.samples)


@pytest.mark.root
@pytest.mark.shares
def test_run_profile_cpu_writes_pprof_of_the_workload(go_pprof, export_busy, workloads, tmp_path):
    w = workloads([export_busy])
    out = tmp_path / "out.pb.gz"
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "4", "--sample-rate", str(HZ),
                 "-o", "pprof", "--file", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert gzip.decompress(out.read_bytes())
    raw = parse_raw(pprof(go_pprof, "-raw", str(out)))
    assert raw.period == PERIOD and raw.sample_types == ["cpu/nanoseconds"]
    assert raw.samples
    total = sum(s["values"][0] for s in raw.samples)
    assert total >= 30 * PERIOD, total   # ~4 s of one busy thread at 99 Hz, less on a loaded machine
    assert all(s["values"][0] % PERIOD == 0 for s in raw.samples)
    assert all(s["labels"].get("comm") == "export_busy" and s["labels"].get("pid") == str(w.pid)
               for s in raw.samples)
    stacks = [raw.stack(s) for s in raw.samples]
    leaf = sum(s["values"][0] for s, st in zip(raw.samples, stacks) if st[:3] == ["export_leaf", "export_outer", "main"])
    assert leaf >= 0.5 * total, stacks
    # The syscall loop shows kernel frames, leaf side of the user frames.
    assert any("__x64_sys_getppid" in st and st.index("__x64_sys_getppid") < st.index("main") for st in stacks), stacks
    mapping = [m for m in raw.mappings.values() if m.startswith(str(export_busy))]
    assert mapping and len(mapping[0].split()[1]) == 40, raw.mappings     # the GNU build id
    top = pprof(go_pprof, "-top", str(out))
    first = next(line for line in top.splitlines() if line.strip().endswith("export_leaf"))
    assert float(first.split()[1].rstrip("%")) >= 50, top
