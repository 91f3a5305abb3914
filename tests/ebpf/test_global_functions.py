"""Global BPF functions: the loader describes them to the verifier, which then checks each once on
its own instead of again at every call. The kernel unwinder's runtime hooks (V8, HotSpot) are
global for that reason: the first JVM or Node.js process waits for that verification."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hotstack import ebpf

from ..peers import require_tool
from .test_loader import configured_spec

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent

# The step program with the runtime hooks as static functions took the verifier through 232k
# instructions (~0.35 CPU-s) here at 5 steps a program, past its 1M limit at 34; as global functions
# ~300k at 34 steps (~0.6 CPU-s), the plain step program ~285k.
JIT_STEP_MOST_VERIFIED = 400_000


def _build(out_dir: Path, *defines: str) -> str:
    require_tool("clang")
    out = out_dir / ("global_functions" + "".join(f"_{d.lower()}" for d in defines) + ".bpf.o")
    arch = subprocess.check_output(["uname", "-m"], text=True).strip()
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}-linux-gnu", "-Wall", "-Werror",
                    *(f"-D{d}" for d in defines), "-c", str(HERE / "bpf" / "global_functions.bpf.c"), "-o", str(out)],
                   check=True)
    return str(out)


def test_a_global_function_of_scalars_loads_with_its_records(tmp_path):
    spec = ebpf.load_spec(_build(tmp_path))
    program = spec.programs["calls_scalars"]
    assert program.functions and program.global_functions == {"add_scaled": 3}
    with ebpf.Collection.load(spec) as c:
        assert c.programs["calls_scalars"].function_records() == 2


def test_a_global_function_taking_a_pointer_is_refused_with_its_name(tmp_path):
    path = _build(tmp_path, "WITH_POINTER")
    with pytest.raises(ebpf.ObjectFormatError, match=r"first_word: argument 0 is not a scalar"):
        ebpf.load_spec(path)


def test_the_runtime_hooks_are_verified_once():
    spec = configured_spec()
    jit = spec.programs["profile_native_step_jit"]
    assert jit.global_functions == {"hs_step": 2, "v8_frame": 3, "v8_finish": 1, "hs_finish": 1}
    assert not spec.programs["profile_native_step"].global_functions
    with ebpf.Collection.load(spec) as c:
        program = c.load_deferred("profile_native_step_jit")
        assert program.function_records() == 5
        verified = program.verified_instructions()
        if verified == 0:
            pytest.skip("the kernel does not report verified instructions (before 5.16)")
        assert verified <= JIT_STEP_MOST_VERIFIED, verified
