"""Feature probes and load-time adaptations, against the real kernel.

The older-kernel forms (preallocated maps, stubbed helpers) are loaded here too: the host's
verifier must accept them, as the old kernels of the matrix (tests/kernels) do."""

from __future__ import annotations

import resource

import pytest

from hotstack import ebpf
from hotstack.bpf import object_path
from hotstack.doctor import CAP_SYS_RESOURCE
from hotstack.ebpf import adapt, features, memlock
from hotstack.sampling.diagnose import has_cap

pytestmark = pytest.mark.root


def test_helper_probes_tell_known_from_unknown():
    assert features.helper_available("bpf_probe_read_user")
    assert features.helper_available("bpf_ringbuf_reserve")
    # a helper perf_event programs may not call is reported missing, not present
    assert not features.helper_available("bpf_get_func_ip", features.PROG_PERF_EVENT)
    assert features.global_data()
    assert features.map_type_available(features.MAP_RINGBUF)


def test_unknown_helper_is_read_from_verifier_logs():
    assert features.unknown_helper("0: (85) call unknown#175\ninvalid func unknown#175\n").name == "bpf_task_pt_regs"
    assert features.unknown_helper("unknown func bpf_loop#181\n").since == "5.17"
    assert features.unknown_helper("R1 type=scalar expected=ctx\n") is None


def _profile_spec():
    """The CPU sampler's object as the default (--unwind kernel) loads it."""
    from hotstack.unwind import kernel_config

    spec = ebpf.load_spec(object_path("profile"), map_prefix="hstest")
    kernel_config.configure(spec)
    spec.set_constant("unwind_in_kernel", 1)
    return spec


def test_old_kernel_forms_load_here(monkeypatch):
    """The forms chosen on 5.10 (no bpf_task_pt_regs, no bpf_get_current_task_btf, preallocated
    perf_event hash maps) are accepted by this kernel's verifier too."""
    monkeypatch.setattr(features, "perf_event_dynamic_hash", lambda: False)
    monkeypatch.setattr(features, "helper_available", lambda name, prog_type=7: name not in adapt.NULL_SAFE_HELPERS)
    spec = _profile_spec()
    adapted, changes = adapt.adapt(spec)
    assert adapted is not spec
    text = [str(c) for c in changes]
    assert any("preallocated" in t and "py_stacks_0" in t for t in text), text
    assert any("bpf_task_pt_regs returns NULL" in t for t in text), text
    assert not adapted.maps["py_stacks_0"].flags & features.BPF_F_NO_PREALLOC
    assert spec.maps["py_stacks_0"].flags & features.BPF_F_NO_PREALLOC, "the original spec is left as it was"
    for helper in adapt.NULL_SAFE_HELPERS:
        assert not adapt._helper_calls(adapted.programs["profile_cpu"].instructions, features.HELPERS[helper].id)
    with ebpf.Collection.load(spec) as coll:     # Collection.load adapts the same way
        assert {str(a) for a in coll.adaptations} == set(text)
        assert "profile_cpu" in coll.programs


def test_nothing_changes_where_the_kernel_has_everything():
    spec = _profile_spec()
    if not (features.perf_event_dynamic_hash() and features.helper_available("bpf_task_pt_regs")):
        pytest.skip("this kernel lacks a feature: adaptations are expected")
    adapted, changes = adapt.adapt(spec)
    assert adapted is spec and changes == []


def test_missing_helper_is_one_line():
    err = ebpf.VerifierError("profile_cpu", 22, "0: (85) call unknown#181\ninvalid func unknown#181\nprocessed 1 insns")
    short = adapt.explain_verifier_error(err)
    assert isinstance(short, adapt.MissingHelperError)
    assert str(short) == "program 'profile_cpu' needs bpf_loop (Linux 5.17+), which this kernel lacks"


def test_memlock_estimate_and_raise(monkeypatch):
    spec = _profile_spec()
    need = memlock.estimate(list(spec.maps.values()))
    rows = spec.maps["nu_rows"].max_entries * spec.maps["nu_rows"].value_size   # the unwinder's row arena
    assert need > rows and need < 1 << 30
    # As on a kernel before 5.11: the limit is raised by what the maps need, and the maps load under it.
    monkeypatch.setattr(features, "memcg_accounting", lambda: False)
    before = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, before[1]))
        try:
            memlock.ensure(list(spec.maps.values()))
        except ebpf.EbpfError as e:
            # only where the hard limit is below the need and raising it takes CAP_SYS_RESOURCE we lack
            assert before[1] != resource.RLIM_INFINITY and before[1] < (64 << 10) + need
            assert not has_cap(CAP_SYS_RESOURCE)
            assert "\n" not in str(e) and "RLIMIT_MEMLOCK is 64 KiB" in str(e)
            return
        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        assert soft >= (64 << 10) + need
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, before)


def test_fentry_probe_agrees_with_the_probe_object():
    """doctor's fentry/fexit line (a trial program attached for an instant) says what the real
    fentry form of kprobe links finds on this kernel (tests/kernels/smoke.py checks the same on
    every kernel of the matrix, arm64 included)."""
    from hotstack.ebpf import links

    said, why = features.tracing_attach()
    assert why and "\n" not in why
    spec = ebpf.load_spec(object_path("probe"), map_prefix="hstest")
    template = spec.programs.pop("probe_fentry")
    spec.programs.pop("probe_fexit")
    with ebpf.Collection.load(spec) as coll:
        try:
            program = coll.load_program("probe_fentry", links.tracing_variant(template, "do_sys_openat2"))
            links.attach_tracing(program).close()
            attached = True
        except ebpf.EbpfError:
            attached = False
    assert attached == said, why
