"""The kernel matrix: boot Debian's kernels under qemu and run the smoke suite (smoke.py) inside.

    python3 tests/kernels/matrix.py [--series 5.10 --series 6.1 ...] [--no-host]

For each kernel series, the newest `linux-image-amd64` of the Debian suite that ships it is found
with apt through a sources list of its own (the host's apt state is not touched), downloaded
(`apt-get download`), unpacked (`dpkg-deb -x`) and cached by version under
$HOTSTACK_CACHE/kernels/VERSION. virtme-ng (installed by .ci/install.d/kernels.sh) boots it with
this machine's root filesystem read-only over 9p, under TCG (`--disable-kvm`: nested KVM fails on
these machines). Python importing hundreds of modules over 9p takes minutes under TCG, so the
guest gets one tar (a "payload": Debian's python3 standard library, hotstack and its
dependencies, the smoke suite, workloads built here) that it unpacks into a tmpfs.

The host's own kernel runs the same suite without a VM. At the end: one table, each kernel by
each item, and the exit code: 1 if an item that expected.json says passes on a kernel series
did not pass (a kernel that passed before and fails now fails CI), else 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))
KERNELS = CACHE / "kernels"
VIRTME = CACHE / "virtme-ng" / "bin" / "virtme-run"
MIRROR = os.environ.get("HOTSTACK_DEBIAN_MIRROR", "http://deb.debian.org")

# kernel series -> the Debian suites that ship it (security updates first: the newest build).
SERIES = {
    "5.10": ("bullseye", "bullseye-security"),
    "6.1": ("bookworm", "bookworm-security"),
    "6.12": ("trixie", "trixie-security"),
}
ITEMS = ("doctor", "programs", "cpu 75/25", "python", "uprobe", "off-cpu", "agent", "kprobes", "fentry", "remap")
BOOT_TIMEOUT = int(os.environ.get("HOTSTACK_KERNEL_TIMEOUT", "1500"))   # seconds per kernel


def log(message: str) -> None:
    print(f"kernels: {message}", file=sys.stderr, flush=True)


# ---- kernels from Debian's archive -------------------------------------------------------------

def _apt_options() -> list[str]:
    apt = KERNELS / "apt"
    for d in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    lines = []
    for suites in SERIES.values():
        for suite in suites:
            archive = "debian-security" if suite.endswith("-security") else "debian"
            lines.append(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {MIRROR}/{archive} "
                         f"{suite} main")
    (apt / "sources.list").write_text("\n".join(lines) + "\n")
    return ["-o", f"Dir::Etc::SourceList={apt / 'sources.list'}", "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={apt / 'lists'}", "-o", f"Dir::Cache={apt / 'cache'}",
            "-o", "Dir::State::status=/dev/null", "-o", "APT::Architecture=amd64",
            "-o", "Acquire::Languages=none", "-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
            "-o", "Debug::NoLocking=1", "-qq"]


def _run(argv: list[str], **kw) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kw).stdout


def resolve_kernels(series: list[str]) -> dict[str, str]:
    """series -> the Debian package of its newest generic amd64 kernel image."""
    opts = _apt_options()
    log("apt-get update (Debian kernel suites, own sources list)")
    _run(["apt-get", *opts, "update"])
    policy = _run(["apt-cache", *opts, "policy", "linux-image-amd64"])
    versions = re.findall(r"^\s+(?:\*\*\* )?(\d[\w.+~-]*) \d+$", policy, re.M)
    packages = {}
    for s in series:
        matching = [v for v in versions if v.startswith(s + ".")]
        if not matching:
            raise SystemExit(f"kernels: no linux-image-amd64 {s}.x in Debian's suites {SERIES[s]}")
        newest = max(matching, key=_version_key)
        depends = _run(["apt-cache", *opts, "depends", f"linux-image-amd64={newest}"])
        image = re.search(r"Depends: (linux-image-[\w.+-]+)", depends)
        if not image:
            raise SystemExit(f"kernels: linux-image-amd64={newest} names no kernel image")
        packages[s] = image.group(1)
    return packages


def _version_key(version: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", version)]


def fetch_kernel(package: str) -> Path:
    """Download and unpack one kernel image package, cached by its version; the image's path."""
    release = package.removeprefix("linux-image-")
    root = KERNELS / release
    image = root / "boot" / f"vmlinuz-{release}"
    if (root / ".complete").exists():
        return image
    shutil.rmtree(root, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=KERNELS) as tmp:
        log(f"apt-get download {package}")
        _run(["apt-get", *_apt_options(), "download", package], cwd=tmp)
        deb = next(Path(tmp).glob("*.deb"))
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    # Debian 13 ships modules under usr/lib; virtme-ng looks for ROOT/lib/modules/RELEASE.
    if not (root / "lib").exists() and (root / "usr" / "lib" / "modules").exists():
        (root / "lib").symlink_to("usr/lib")
    _run(["depmod", "-b", str(root), release])
    (root / ".complete").touch()
    return image


# ---- the guest's payload ---------------------------------------------------------------------

# hotstack's runtime dependencies, as pyproject.toml lists them (a copy kept here fell behind when
# httpx joined the list: the agent item failed in every VM on the import of its HTTP client).
with open(ROOT / "pyproject.toml", "rb") as _f:
    DEPENDENCIES = tuple(tomllib.load(_f)["project"]["dependencies"])


def _site_packages() -> Path:
    """hotstack's runtime dependencies for Debian's python3, installed once per dependency list."""
    python = "/usr/bin/python3"
    version = _run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).strip()
    key = hashlib.sha256(("\n".join(DEPENDENCIES) + version).encode()).hexdigest()[:12]
    target = KERNELS / f"site-{version}-{key}"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        log(f"pip install hotstack's dependencies for python {version} into {target}")
        _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), *DEPENDENCIES])
        (target / ".complete").touch()
    return target


def _build_workloads(out: Path, cc: str = "cc") -> None:
    """The C workloads, built with `cc` (arm64.py: Debian's aarch64-linux-gnu-gcc)."""
    fp = ["-O2", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"]
    tests = ROOT / "tests"
    for source, name, flags in (
            (tests / "engine" / "workloads" / "hot_ab.c", "hot_ab", fp),
            (tests / "probes" / "workloads" / "offcpu_split.c", "offcpu_split", fp),
            (tests / "unwind" / "workloads" / "sleep_leaf.c", "sleep_leaf", ["-O1", "-fno-omit-frame-pointer"]),
            (tests / "probes" / "workloads" / "malloc_ratio.c", "malloc_ratio", fp),
            (tests / "alloy" / "workloads" / "spin.c", "alloy-spin", ["-O1", "-g", "-fno-omit-frame-pointer"]),
            (tests / "unwind" / "workloads" / "swap_libs.c", "swap_libs", ["-O1", "-fno-omit-frame-pointer"]),
            (tests / "unwind" / "workloads" / "swap_a.c", "libswap_a.so", ["-O1", "-shared", "-fPIC"]),
            (tests / "unwind" / "workloads" / "swap_b.c", "libswap_b.so", ["-O1", "-shared", "-fPIC"]),
            (tests / "unwind" / "workloads" / "swap_b.c", "libswap_b_pad.so", ["-O1", "-shared", "-fPIC", "-DSWAP_PAD"])):
        _run([cc, *flags, "-o", str(out / name), str(source)])
    shutil.copy(tests / "python" / "workload_abc.py", out / "workload_abc.py")


def build_payload(work: Path) -> Path:
    """One tar with everything the guest runs: stdlib, dependencies, hotstack, suite, workloads."""
    stdlib = Path(sysconfig.get_paths(vars={"base": "/usr", "installed_base": "/usr"})["stdlib"])
    if not (stdlib / "os.py").exists():
        stdlib = Path(_run(["/usr/bin/python3", "-c", "import os, sys; print(os.path.dirname(os.__file__))"]).strip())
    workloads = work / "workloads"
    workloads.mkdir(parents=True, exist_ok=True)
    _build_workloads(workloads)
    payload = work / "payload.tar"
    with tarfile.open(payload, "w") as tar:
        tar.add(stdlib, arcname=f"prefix/lib/{stdlib.name}",
                filter=lambda t: None if "/test/" in t.name + "/" or t.name.endswith("/test") else t)
        tar.add(_site_packages(), arcname="site", filter=lambda t: None if t.name.endswith(".complete") else t)
        tar.add(ROOT / "src" / "hotstack", arcname="site/hotstack",
                filter=lambda t: None if "__pycache__" in t.name else t)
        tar.add(HERE / "smoke.py", arcname="smoke.py")
        tar.add(workloads, arcname="workloads")
    return payload


# ---- running the suite ----------------------------------------------------------------------

def run_in_vm(image: Path, payload: Path, work: Path, only: list[str] | None = None,
              tag: str = "") -> tuple[dict | None, float, str]:
    """Boot `image`, run the suite (or `only` these items); (results or None, wall seconds, the console's tail)."""
    rw = work / (image.name.removeprefix("vmlinuz-") + tag)
    shutil.rmtree(rw, ignore_errors=True)
    rw.mkdir(parents=True)
    results = rw / "results.json"
    # The guest sees this machine's root read-only, but with tmpfs over some directories (/var/cache
    # among them): what it reads goes into its read-write directory.
    os.link(payload, rw / "payload.tar")
    shutil.copy(HERE / "guest.sh", rw / "guest.sh")
    select = "".join(f" --only {shlex.quote(item)}" for item in only or [])
    script = f"bash {rw / 'guest.sh'} {rw / 'payload.tar'} {results}{select} >{rw}/guest.log 2>&1"
    argv = [str(VIRTME), "--kimg", str(image), "--mods=auto", "--disable-kvm", "--cpus", "2", "--memory", "2G",
            "--rwdir", str(rw), "--script-sh", script]
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BOOT_TIMEOUT)
        console = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        console = f"no end after {BOOT_TIMEOUT} s; " + str(e.stdout or "")[-500:]
    seconds = time.monotonic() - start
    guest_log = (rw / "guest.log").read_text(errors="replace") if (rw / "guest.log").exists() else ""
    tail = "\n".join((console + "\n" + guest_log).strip().splitlines()[-15:])
    if not results.exists():
        return None, seconds, tail
    return json.loads(results.read_text()), seconds, tail


def run_on_host(payload_dir: Path, work: Path, only: list[str] | None = None,
                tag: str = "") -> tuple[dict | None, float, str]:
    out = work / f"host{tag}" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    select = [arg for item in only or [] for arg in ("--only", item)]
    proc = subprocess.run([sys.executable, str(HERE / "smoke.py"), "--workloads", str(payload_dir), "--out",
                           str(out), *select], capture_output=True, text=True, timeout=BOOT_TIMEOUT)
    seconds = time.monotonic() - start
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    return (json.loads(out.read_text()) if out.exists() else None), seconds, tail


# ---- the table and the verdict ----------------------------------------------------------------

def table(rows: list[tuple[str, dict | None, float]]) -> str:
    """Markdown: one row per kernel, one column per item (pass / off: reason / FAIL: why)."""
    lines = ["| kernel | wall | " + " | ".join(ITEMS) + " | off, as doctor says |", "|---|---|" + "---|" * (len(ITEMS) + 1)]
    for label, results, seconds in rows:
        cells = []
        for item in ITEMS:
            r = (results or {}).get("items", {}).get(item)
            if r is None:
                cells.append("not run")
            elif r["status"] == "pass":
                cells.append("pass")
            else:
                cells.append(f"{'off' if r['status'] == 'off' else 'FAIL'}: {r['detail'][:160]}")
        doctor = (results or {}).get("items", {}).get("doctor", {})
        cells.append(doctor.get("detail", "") if doctor.get("status") == "pass" else "")
        lines.append(f"| {label} | {seconds / 60:.1f} min | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def regressions(label: str, results: dict | None, expected: dict, only: list[str] | None = None) -> list[str]:
    """The items that expected.json says pass on this kernel series and that did not pass now."""
    want = {item: status for item, status in expected.get(label.split()[0], {}).items()
            if not only or item in only}
    return [item for item, status in want.items()
            if status == "pass" and (results or {}).get("items", {}).get(item, {}).get("status") != "pass"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", action="append", choices=sorted(SERIES), help="kernel series (repeatable)")
    parser.add_argument("--no-host", action="store_true", help="skip the host's own kernel")
    parser.add_argument("--only", action="append", choices=ITEMS, help="run only these items (repeatable)")
    parser.add_argument("--results", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("HOTSTACK_KERNEL_JOBS", "3")),
                        help="VMs at a time (much of the suite waits on fixed durations)")
    args = parser.parse_args()
    series = args.series or list(SERIES)
    if not VIRTME.exists():
        log(f"virtme-ng is not installed at {VIRTME}: run .ci/install.d/kernels.sh")
        return 2
    KERNELS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    packages = resolve_kernels(series)
    images = {s: fetch_kernel(p) for s, p in packages.items()}
    work = KERNELS / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    payload = build_payload(work)
    log(f"payload {payload.stat().st_size >> 20} MiB; fetch and build took {time.monotonic() - started:.0f} s")
    expected = json.loads((HERE / "expected.json").read_text())
    runs: dict[str, tuple] = {}    # label -> (runner, results, seconds)
    if not args.no_host:
        # Alone first: the VMs would take its CPU.
        label = f"host {os.uname().release}"
        runner = lambda only=None, tag="": run_on_host(work / "workloads", work, only, tag)  # noqa: E731
        results, seconds, tail = runner(args.only)
        runs[label] = (runner, results, seconds)
        log(f"{label}: {seconds:.0f} s" + ("" if results else f"; no results:\n{tail}"))

    def boot(item: tuple[str, Path]) -> tuple[str, tuple]:
        s, image = item
        runner = lambda only=None, tag="": run_in_vm(image, payload, work, only, tag)  # noqa: E731
        results, seconds, tail = runner(args.only)
        label = f"{s} ({image.name.removeprefix('vmlinuz-')})"
        log(f"{label}: {seconds:.0f} s" + ("" if results else f"; no results:\n{tail}"))
        return label, (runner, results, seconds)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs.update(pool.map(boot, images.items()))
    # A failed item runs once more (as `make test` reruns a failed test): shares and timings on a
    # busy machine under emulation can miss; a real regression fails both runs.
    bad = []
    for label, (runner, results, seconds) in runs.items():
        failed = regressions(label, results, expected, args.only)
        if not failed:
            continue
        log(f"{label}: {', '.join(failed)} did not pass; running them once more")
        again, more, _tail = runner(failed, "-rerun")
        results = results or {"items": {}}
        for item in failed:
            r = (again or {}).get("items", {}).get(item)
            if r is not None:
                if r["status"] == "pass":
                    r["detail"] += " (passed on the rerun)"
                results["items"][item] = r
        runs[label] = (runner, results, seconds + more)
        bad += [f"{label}: {item} passed before, now "
                f"{results['items'].get(item, {}).get('status', 'not run')}"
                for item in regressions(label, results, expected, args.only)]
    rows = [(label, results, seconds) for label, (_runner, results, seconds) in runs.items()]
    text = table(rows)
    total = time.monotonic() - started
    print(text)
    print(f"\nkernel matrix wall time: {total / 60:.1f} min")
    if args.results:
        args.results.write_text(text + f"\n\nwall time: {total / 60:.1f} min\n")
    for line in bad:
        print(f"kernels: REGRESSION: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
