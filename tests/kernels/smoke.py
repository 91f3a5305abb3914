"""The kernel matrix's smoke suite: run inside a VM booted on one kernel (or on the host itself).

One interpreter runs every item in-process through hotstack's command line (`cli.main`), because
under qemu's TCG each Python start-up costs tens of seconds. Each item ends as
  pass   it worked and its checks held,
  off    the kernel cannot run the feature, and hotstack said so in one line (the reason is kept),
  fail   anything else (a crash, a verifier dump, a wrong result).
The results go to a JSON file that tests/kernels/matrix.py turns into the table.

    python3 smoke.py --workloads DIR --out results.json
DIR holds the workloads built on the host (matrix.py: hot_ab, offcpu_split, malloc_ratio, spin,
workload_abc.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hotstack import cli
from hotstack.doctor import MINIMUM, features_off
from hotstack.ebpf import features

PERF_EVENT = features.PROG_PERF_EVENT
# seconds; qemu TCG on a loaded 2-core machine is slow (arm64 emulated on x86-64: slower still)
ITEM_TIMEOUT = int(os.environ.get("HOTSTACK_SMOKE_ITEM_TIMEOUT", "420"))


class Off(Exception):
    """The kernel cannot run this feature; the message is hotstack's one line about it."""


class Timeout(Exception):
    pass


def hotstack(*args: str) -> tuple[int, str, str]:
    """Run the command line in this process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code or 0, out.getvalue(), err.getvalue()


def one_line_error(code: int, err: str) -> str | None:
    """hotstack's one-line error, if that is how the command ended (never a traceback or a dump)."""
    lines = [line for line in err.strip().splitlines() if line.startswith("hotstack: error:")]
    if code == 2 and len(lines) == 1 and "Traceback" not in err:
        return lines[0].removeprefix("hotstack: error: ")
    return None


def folded(stdout: str) -> list[tuple[list[str], int]]:
    rows = []
    for line in stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            rows.append((stack.split(";"), int(count)))
    return rows


class Workload:
    """A process the items profile; stopped at the end of the item."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, wait_line: str | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        if wait_line is not None:
            line = self.proc.stdout.readline().strip()
            if line != wait_line:
                raise RuntimeError(f"{argv[0]} did not start: {line!r}")
        else:
            time.sleep(1.0)
        self.pid = self.proc.pid

    def __enter__(self) -> "Workload":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def run_gadget(*args: str) -> str:
    """Run a gadget with `-o folded`; the folded stacks, or Off with its one-line error, or RuntimeError.

    Folded output goes through --file: the gadget binds stdout when first imported."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "folded.txt"
        code, out, err = hotstack("run", *args, "-o", "folded", "--file", str(path))
        if code == 0:
            return path.read_text() if path.exists() else ""
    line = one_line_error(code, err)
    if line is not None:
        raise Off(line)
    raise RuntimeError(f"exit {code}: {err.strip()[-600:]}")


# ---- the items --------------------------------------------------------------------------------

def item_doctor(w: Path) -> str:
    """`hotstack doctor` exits 0, states the minimum, and prints one line per feature that is off;
    its word on each helper agrees with the probe."""
    from hotstack.doctor import run_checks

    code, out, err = hotstack("doctor")
    if code != 0:
        raise RuntimeError(f"doctor exit {code}: {out[-800:]} {err[-300:]}")
    text = " ".join(out.split())   # lines outside the table may wrap
    if f"hotstack needs {MINIMUM}+" not in text:
        raise RuntimeError("doctor does not state the minimum kernel")
    expected = features_off()
    for line in expected:
        if line not in text:
            raise RuntimeError(f"doctor misses the line {line!r}")
    helpers = next(c for c in run_checks() if c.name == "BPF helpers")
    for name in ("bpf_task_pt_regs", "bpf_get_current_task_btf", "bpf_loop", "bpf_find_vma"):
        said_missing = f"{name} ({features.HELPERS[name].since}+)" in helpers.detail
        if said_missing == features.helper_available(name):
            raise RuntimeError(f"doctor's word on {name} disagrees with the probe: {helpers.detail}")
    return "; ".join(expected) or "every feature on"


def item_programs(w: Path) -> str:
    """Every program of every committed object loads, with its load-time adaptations (fentry and
    fexit templates: item_fentry). exec is loaded here on maps of its own: beside a sampler, a
    refused load only leaves exec detection to comm changes (sampling/sampler.py), which no other
    item would see."""
    from hotstack import ebpf
    from hotstack.bpf import object_path
    from hotstack.ebpf import links
    from hotstack.ebpf import features
    from hotstack.sampling.runtime_maps import LOOP_SUFFIX
    from hotstack.unwind import kernel_config
    from hotstack.unwind.kernel_config import has_maple_tree

    loaded, notes = [], []
    seconds: dict[str, float] = {}
    names = ["profile", "offcpu", "probe", "exec"]
    if has_maple_tree() and not kernel_config.has_mm_lock_seq():
        names.append("mappings")     # beside the unwinder where it walks the VMA tree before 6.4
    for name in names:
        spec = ebpf.load_spec(object_path(name), map_prefix="smoke")
        if "unwind_in_kernel" in spec.variables:      # as the default, --unwind kernel, loads it
            kernel_config.configure(spec)
            spec.set_constant("unwind_in_kernel", 1)
        if name == "mappings":
            kernel_config.configure_mapped(spec)       # (a KeyError: no vma_store tracepoint)
        links.resolve_btf_targets(spec)              # tp_btf/sched_switch
        for key in [k for k, p in spec.programs.items() if p.section in ("fentry", "fexit")]:
            del spec.programs[key]
        if not features.helper_available("bpf_loop"):
            # bpf_loop variants of the walkers: loaded only where the kernel has bpf_loop (runtime_maps)
            for key in [k for k in spec.programs if k.endswith(LOOP_SUFFIX)]:
                del spec.programs[key]
                notes.append(f"{key} not loaded (no bpf_loop)")
        # one program at a time, each load's time in the log as it ends (a load that never ends
        # is the one after the last line)
        with ebpf.Collection.load(spec, defer=set(spec.programs)) as coll:
            for program in list(spec.programs):
                start = time.monotonic()
                coll.load_deferred(program)
                seconds[program] = time.monotonic() - start
                print(f"smoke: programs: {name}/{program} loaded in {seconds[program]:.1f} s", file=sys.stderr,
                      flush=True)
            loaded += list(coll.programs)
            notes += [str(a) for a in coll.adaptations]
    slowest = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])[:3])
    return (f"{len(loaded)} programs: {', '.join(loaded)}; slowest loads: {slowest}"
            + (f" (adapted: {'; '.join(notes)})" if notes else ""))


def item_fentry(w: Path) -> str:
    """The fentry/fexit form of kprobe links (used where kprobes are off), on do_sys_openat2; and
    doctor's fentry/fexit line (its trial program) says what these real programs found."""
    from hotstack import ebpf
    from hotstack.bpf import object_path
    from hotstack.ebpf import links

    said, why = features.tracing_attach()
    spec = ebpf.load_spec(object_path("probe"), map_prefix="smoke")
    templates = {k: spec.programs.pop(k) for k in list(spec.programs) if spec.programs[k].section in ("fentry", "fexit")}
    with ebpf.Collection.load(spec) as coll:
        for key, template in templates.items():
            try:
                program = coll.load_program(key, links.tracing_variant(template, "do_sys_openat2"))
                links.attach_tracing(program).close()
            except ebpf.EbpfError as e:
                reason = e.short() if isinstance(e, ebpf.VerifierError) else str(e)
                if said:
                    raise RuntimeError(f"doctor says fentry/fexit work ({why}), but {template.section} on "
                                       f"do_sys_openat2 was refused: {reason}") from None
                raise Off(f"{template.section} on do_sys_openat2 refused by this kernel: {reason} "
                          f"(doctor: {why})") from None
    if not said:
        raise RuntimeError(f"doctor says fentry/fexit are off ({why}), but they attached to do_sys_openat2")
    return "fentry and fexit attached to do_sys_openat2"


def item_cpu_split(w: Path) -> str:
    with Workload([str(w / "hot_ab")]) as wl:
        out = run_gadget("profile_cpu", "--map-fetch-interval", "0", "--pid", str(wl.pid), "--timeout", "8", "--sample-rate", "99")
    rows = folded(out)
    total = sum(c for _, c in rows)
    by = Counter()
    for frames, count in rows:
        for fn in ("hot_a", "hot_b"):
            if fn in frames:
                by[fn] += count
                if "main" not in frames or frames.index("main") > frames.index(fn):
                    raise RuntimeError(f"main is not above {fn}: {';'.join(frames)}")
    if total < 100:
        raise RuntimeError(f"only {total} samples")
    a, b = 100 * by["hot_a"] / total, 100 * by["hot_b"] / total
    if abs(a - 75) > 7 or abs(b - 25) > 7:
        raise RuntimeError(f"hot_a {a:.1f}% hot_b {b:.1f}% of {total}")
    return f"hot_a {a:.1f}% hot_b {b:.1f}% of {total} samples"


def item_remap(w: Path) -> str:
    """A library unloaded and another loaded at its address (swap_libs, 0.5 s a library): every
    sample of either library's hot function is named as that library's, under its own caller.
    Kernels before 6.1 have no VMA tree the program walks: nothing there tells of the change. Before
    6.4 (no mm_lock_seq) a change is told by the mapping and page counts and by the count of
    executable mappings made (bpf/mappings.bpf.c, on the vma_store tracepoint of 6.1-6.3): the
    libraries are of equal page counts there too, unless that tracepoint is missing."""
    from hotstack.ebpf import links
    from hotstack.unwind.kernel_config import has_maple_tree, has_mm_lock_seq

    if not has_maple_tree():
        raise Off("no maple tree: the kernel unwinder cannot tell a library loaded where another was")
    if has_mm_lock_seq():
        lib_b, note = "libswap_b.so", "libraries of equal page counts"
    else:
        try:
            links.btf_target_id("tp_btf", "vma_store")
            lib_b, note = "libswap_b.so", "no mm_lock_seq, mappings counted at vma_store: libraries of equal page counts"
        except KeyError:
            lib_b, note = "libswap_b_pad.so", "no mm_lock_seq nor vma_store: libraries of different page counts"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "addresses"
        with Workload([str(w / "swap_libs"), str(w / "libswap_a.so"), str(w / lib_b), "0.5",
                       str(report)]) as wl:
            while not report.exists() or not report.read_text().strip():
                time.sleep(0.2)
            at = report.read_text().split()
            out = run_gadget("profile_cpu", "--map-fetch-interval", "0", "--pid", str(wl.pid), "--timeout", "8",
                             "--sample-rate", "99")
    if len(at) != 2 or at[0] != at[1]:
        raise RuntimeError(f"b_hot is not where a_pad was: {at}")
    rows = folded(out)
    by = Counter()
    for frames, count in rows:
        for fn, caller in (("a_hot", "run_a"), ("b_hot", "run_b"), ("a_pad", "run_a"), ("b_pad", "run_b")):
            if fn in frames:
                by[fn] += count
                if caller not in frames:
                    raise RuntimeError(f"{fn} named under the other library's caller: {';'.join(frames)}")
    total = sum(c for _, c in rows)
    # (each library runs half the time; under emulation userspace may read the maps only after the
    # process swapped back, and what it cannot tell apart is left unnamed, never named wrong)
    if by["a_hot"] < 0.05 * total or by["b_hot"] < 0.05 * total:
        raise RuntimeError(f"a_hot {by['a_hot']} b_hot {by['b_hot']} of {total} samples")
    return f"a_hot {by['a_hot']} b_hot {by['b_hot']} of {total} samples, each under its own caller ({note})"


def item_python(w: Path) -> str:
    # Debian's python3 with its own standard library (in a VM: the copy in the payload's tmpfs, as
    # PYTHONHOME says; reading it over 9p under emulation takes minutes), without hotstack's path.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with Workload(["/usr/bin/python3", str(w / "workload_abc.py")], env=env, wait_line="ready") as wl:
        out = run_gadget("profile_cpu", "--map-fetch-interval", "0", "--pid", str(wl.pid), "--timeout", "6", "--sample-rate", "99")
    rows = folded(out)
    on = sum(c for f, c in rows if "caller" in f and ("a" in f or "b" in f or "c" in f))
    total = sum(c for _, c in rows)
    if not on:
        raise RuntimeError(f"no Python frames in {total} samples: {out[:300]!r}")
    return f"{on} of {total} samples with Python frames (caller;a|b|c) of Debian's python3"


def item_uprobe(w: Path) -> str:
    libc = next((p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                             "/usr/lib/x86_64-linux-gnu/libc.so.6") if os.path.exists(p)), None)
    with Workload([str(w / "malloc_ratio")]) as wl:
        out = run_gadget("profile_probe", "--map-fetch-interval", "0", "--probe", f"uprobe:{libc}:malloc", "--pid", str(wl.pid),
                         "--timeout", "4")
    rows = folded(out)
    three = sum(c for f, c in rows if "alloc_three" in f)
    total = sum(c for _, c in rows)
    if total < 100 or not three:
        raise RuntimeError(f"{total} hits, {three} from alloc_three")
    return f"{total} malloc hits, {100 * three / total:.0f}% from alloc_three"


def item_offcpu(w: Path) -> str:
    with Workload([str(w / "offcpu_split")]) as wl:
        out = run_gadget("profile_offcpu", "--map-fetch-interval", "0", "--pid", str(wl.pid), "--timeout", "4")
    rows = folded(out)
    by = Counter()
    for frames, count in rows:
        for fn in ("sleep_eight_ms", "wait_on_pipe"):
            if fn in frames:
                by[fn] += count
    both = by["sleep_eight_ms"] + by["wait_on_pipe"]
    if not both:
        raise RuntimeError(f"no off-CPU time in the workload's functions: {out[:300]!r}")
    # waits in libc (no frame pointers) called from a frame-pointer program: the unwinder keeps the
    # caller (from the registers the thread entered the kernel with; on kernels before 5.15 found
    # at the top of its kernel stack)
    with Workload([str(w / "sleep_leaf")]) as wl:
        leaf = folded(run_gadget("profile_offcpu", "--map-fetch-interval", "0", "--pid", str(wl.pid),
                                 "--timeout", "3"))
    waits = Counter()
    for frames, count in leaf:
        if any("nanosleep" in f for f in frames):
            waits[next((f for f in ("wait_a", "wait_b") if f in frames), None)] += count
    in_libc = sum(waits.values())
    kept = waits["wait_a"] + waits["wait_b"]
    if not in_libc or kept < 0.98 * in_libc:
        raise RuntimeError(f"callers of libc's nanosleep lost: {dict(waits)}")
    return (f"sleep_eight_ms {100 * by['sleep_eight_ms'] / both:.0f}% of {both / 1e9:.2f} s off CPU; "
            f"libc waits: caller kept in {100 * kept / in_libc:.0f}%, wait_a {100 * waits['wait_a'] / kept:.0f}%")


# The built-in pipeline (`hotstack agent --print-default-config`) kept to the workload, and a shorter
# collect interval: symbolizing every process of the VM under emulation would take minutes.
AGENT_CONFIG = """
discovery.process "all" {
  refresh_interval = "5s"
}
discovery.relabel "services" {
  targets = discovery.process.all.targets
  rule {
    action        = "replace"
    source_labels = ["__meta_process_exe"]
    regex         = ".*/([^/]+)$"
    target_label  = "service_name"
  }
  rule {
    action        = "keep"
    source_labels = ["service_name"]
    regex         = "alloy-spin"
  }
}
pyroscope.ebpf "default" {
  targets          = discovery.relabel.services.output
  forward_to       = [hotstack.local_store.default.receiver]
  collect_interval = "5s"
}
hotstack.local_store "default" {
  directory = "STORE"
  retention = "1h"
  window    = "15m"
}
"""


def item_agent(w: Path) -> str:
    """The agent's pipeline writes a pprof file of the workload (in a process of its own: the agent
    leaves with os._exit once flushed)."""
    with tempfile.TemporaryDirectory() as store, Workload([str(w / "alloy-spin")]):
        config = Path(store) / "agent.alloy"
        config.write_text(AGENT_CONFIG.replace("STORE", store))
        proc = subprocess.run([sys.executable, "-m", "hotstack", "agent", str(config), "--duration", "20",
                               "--server.http.listen-addr", "127.0.0.1:0"],
                              capture_output=True, text=True, timeout=ITEM_TIMEOUT - 10)
        files = sorted(Path(store).rglob("*.pb.gz"))
        if proc.returncode != 0 and not files:
            line = one_line_error(proc.returncode, proc.stderr)
            if line is not None:
                raise Off(line)
            raise RuntimeError(f"agent exit {proc.returncode}: {proc.stderr.strip()[-600:]}")
        if not files:
            raise RuntimeError(f"no pprof file written: {proc.stderr.strip()[-600:]}")
        return f"{len(files)} pprof files, e.g. {files[0].relative_to(store)}"


def item_kprobes(w: Path) -> str:
    out = run_gadget("profile_probe", "--host", "--map-fetch-interval", "0", "--probe", "kprobe:do_sys_openat2", "--probe", "kretprobe:do_sys_openat2",
                     "--timeout", "3")
    rows = folded(out)
    total = sum(c for _, c in rows)
    if not total:
        raise RuntimeError("no probe hits on do_sys_openat2")
    return f"{total} hits on do_sys_openat2 (kprobe + kretprobe)"


ITEMS = {
    "doctor": item_doctor,
    "programs": item_programs,
    "cpu 75/25": item_cpu_split,
    "python": item_python,
    "uprobe": item_uprobe,
    "off-cpu": item_offcpu,
    "agent": item_agent,
    "kprobes": item_kprobes,
    "fentry": item_fentry,
    "remap": item_remap,
}


def _alarm(signum, frame):
    raise Timeout()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workloads", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", action="append", help="run only these items")
    args = parser.parse_args()
    results = {"kernel": os.uname().release, "machine": platform.machine(), "items": {}}
    signal.signal(signal.SIGALRM, _alarm)
    for name, fn in ITEMS.items():
        if args.only and name not in args.only:
            continue
        start = time.monotonic()
        signal.alarm(ITEM_TIMEOUT)
        try:
            status, detail = "pass", fn(args.workloads)
        except Off as e:
            status, detail = "off", str(e)
        except Timeout:
            status, detail = "fail", f"no result after {ITEM_TIMEOUT} s"
        except Exception as e:   # the item's failure, in one line for the table
            status, detail = "fail", f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
        finally:
            signal.alarm(0)
        seconds = round(time.monotonic() - start, 1)
        results["items"][name] = {"status": status, "detail": detail, "seconds": seconds}
        print(f"smoke: {name}: {status} ({seconds} s): {detail}", flush=True)
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
