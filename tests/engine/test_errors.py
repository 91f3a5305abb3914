"""Bad situations: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import errno

import pytest

from hotstack import ebpf
from hotstack.sampling import diagnose

from ..conftest import hotstack
from ..peers import require_tool

# Root without the capabilities that eBPF needs: capsh drops them from the bounding set, then execs.
WITHOUT_CAPS = ["capsh", "--drop=cap_sys_admin,cap_bpf,cap_perfmon", "--", "-c", 'exec "$0" "$@"']


def assert_one_line_error(r, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.root
def test_without_capabilities():
    require_tool("capsh")
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1", prefix=WITHOUT_CAPS)
    assert_one_line_error(r, "missing privileges", "CAP_BPF", "CAP_PERFMON")


@pytest.mark.root
def test_doctor_reports_missing_privileges():
    require_tool("capsh")
    r = hotstack("doctor", prefix=WITHOUT_CAPS)
    assert r.returncode == 2
    assert "privileges" in r.stdout and "MISSING" in r.stdout


@pytest.mark.root
def test_doctor_ok_as_root():
    r = hotstack("doctor")
    assert r.returncode == 0, r.stdout
    assert "profiling can run" in r.stdout
    # The kprobes row tells the truth about this kernel, whichever it is.
    from hotstack.ebpf.links import pmu_available
    row = next(line for line in r.stdout.splitlines() if line.startswith("│ kprobes"))
    status = row.split("│")[2].strip()
    assert status == ("ok" if pmu_available("kprobe") else "missing"), row


@pytest.mark.parametrize("args, needle", [
    (["--sample-rate", "0"], "--sample-rate"),
    (["--sample-rate", "5000"], "--sample-rate"),
    (["-o", "xml"], "-o xml"),
    (["--map-fetch-interval", "soon"], "--map-fetch-interval"),
    (["--kernel-stacks-only", "--user-stacks-only"], "exclude each other"),
    (["--annotate", "nosuchds:a=b"], "--annotate"),
    (["--annotate", "samples.nosuchfield:profiles.sample-attribute=true"], "no field"),
])
def test_bad_flags(args, needle):
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1", *args)
    assert_one_line_error(r, needle)


def test_unknown_gadget():
    r = hotstack("run", "profile_gpu")
    assert_one_line_error(r, "unknown gadget")


def test_explain_perf_events_not_permitted():
    e = diagnose.explain(ebpf.SyscallError.from_errno("perf_event_open(cpu 0)", errno.EACCES))
    assert "perf events not permitted" in str(e) and "perf_event_paranoid" in str(e)
    assert e.exit_code == 2


def test_explain_verifier_rejection_shows_log_tail():
    log = "0: (79) r0 = *(u64 *)(r1 +32000)\ninvalid bpf_context access off=32000 size=8\nprocessed 1 insns"
    e = diagnose.explain(ebpf.VerifierError("profile_cpu", errno.EACCES, log))
    assert "verifier rejected" in str(e) and "invalid bpf_context access" in str(e)


def test_explain_no_bpf_syscall():
    e = diagnose.explain(ebpf.SyscallError.from_errno("create map counts", errno.ENOSYS))
    assert "CONFIG_BPF_SYSCALL" in str(e)


def test_explain_memlock_on_old_kernels(monkeypatch):
    monkeypatch.setattr(diagnose, "kernel_version", lambda: (5, 4))
    monkeypatch.setattr(diagnose, "can_profile_caps", lambda caps=None: True)
    monkeypatch.setattr(diagnose, "read_sysctl", lambda name: "0")
    e = diagnose.explain(ebpf.SyscallError.from_errno("create map counts", errno.EPERM))
    assert "memlock" in str(e) and "ulimit -l unlimited" in str(e)


def test_too_old_kernel_is_named(monkeypatch):
    monkeypatch.setattr(diagnose, "kernel_version", lambda release=None: (4, 19))
    with pytest.raises(diagnose.HotstackError, match="too old"):
        diagnose.check_preconditions()
