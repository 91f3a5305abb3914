"""The kernel matrix on arm64: Debian's arm64 kernel booted in qemu-system-aarch64 (TCG) on an arm64
Debian root filesystem, running the smoke suite (smoke.py) with hotstack's arm64 BPF objects.

    python3 tests/kernels/arm64.py [--only ITEM ...]      (`make test-arm64`)

- The root filesystem: `mmdebstrap --arch=arm64` of Debian's bookworm (python3, the kernel
  package linux-image-arm64 with its initramfs, kmod, iproute2), run through qemu-user-static
  (binfmt), turned into an ext4 image (`mke2fs -d`), cached under
  $HOTSTACK_CACHE/arm64/rootfs-SUITE-KEY with the kernel and initramfs it installed
  (vmlinuz-RELEASE: the kernel's version names it). A tiny /sbin/hs-init in the image runs the
  guest script of the payload disk and powers the VM off.
- The payload (a second, raw disk: a tar): hotstack as a wheel built from this tree, its
  dependencies as PyPI's aarch64 wheels for the guest's python (`pip install --platform
  manylinux2014_aarch64 --only-binary=:all:`, cached), the smoke suite, and the C workloads built
  with Debian's aarch64-linux-gnu-gcc.
- The results: the guest writes results.json into the root image (a copy per run); `debugfs`
  reads it back, partial results included if the VM ran out of time.

The same table as matrix.py at the end; exit 1 if an item that expected.json says passes on
"arm64" did not pass. Slow (every arm64 instruction is emulated: ~20-40 min), hence not in
`.ci/run`; .ci/install.d/arm64.sh installs qemu, mmdebstrap and the cross compiler when
HOTSTACK_ARM64=1 (`make test-arm64` runs it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import matrix  # noqa: E402  (tests/kernels/matrix.py: the table, the workloads, the dependency list)

HERE = matrix.HERE
ROOT = matrix.ROOT
ARM64 = matrix.CACHE / "arm64"
SUITE = os.environ.get("HOTSTACK_ARM64_SUITE", "bookworm")
GUEST_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
ROOTFS_PACKAGES = ("python3", "mount", "kmod", "iproute2", "procps", "linux-image-arm64", "initramfs-tools", "e2fsprogs",
                   "udev")
ROOTFS_SIZE = "3G"
CROSS_CC = "aarch64-linux-gnu-gcc"
TIMEOUT = int(os.environ.get("HOTSTACK_ARM64_TIMEOUT", "5400"))   # seconds for the whole VM run
ITEM_TIMEOUT = os.environ.get("HOTSTACK_SMOKE_ITEM_TIMEOUT", "900")

# Runs as the guest's init (kernel command line init=): the payload disk's guest script, then off.
HS_INIT = """#!/bin/sh
mount -t proc proc /proc 2>/dev/null
mount -t sysfs sysfs /sys 2>/dev/null
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /run/hs
mount -t tmpfs -o exec,size=1g tmpfs /run/hs
mkdir -p /hs-results
tar -xf /dev/vdb -C /run/hs && sh /run/hs/guest.sh
sync
echo o > /proc/sysrq-trigger
sleep 30
"""

# In the guest, from the payload: what a host normally has mounted, then the suite.
GUEST_SH = """#!/bin/sh
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug
mount -t tmpfs -o exec tmpfs /tmp
ip link set lo up 2>/dev/null
# the classic default limit, so that kernels before 5.11 show the loader raising it
ulimit -l 64
export PYTHONPATH=/run/hs/site PYTHONDONTWRITEBYTECODE=1 HOME=/tmp HOTSTACK_SMOKE_ITEM_TIMEOUT={item_timeout}
echo "guest: $(uname -srm), python $(python3 -V 2>&1)"
python3 /run/hs/smoke.py --workloads /run/hs/workloads --out /hs-results/results.json {args}
echo "guest: smoke suite done"
"""


def log(message: str) -> None:
    print(f"arm64: {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], **kw) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"arm64: {' '.join(argv[:3])}... failed ({proc.returncode}): "
                         f"{(proc.stderr or proc.stdout).strip()[-1500:]}")
    return proc.stdout


# ---- the root filesystem and its kernel ------------------------------------------------------

def build_rootfs() -> Path:
    """The cached arm64 root image with the kernel and initramfs Debian installed into it."""
    packages = hashlib.sha256("\n".join((SUITE, *ROOTFS_PACKAGES)).encode()).hexdigest()[:12]
    key = hashlib.sha256("\n".join((packages, HS_INIT, ROOTFS_SIZE)).encode()).hexdigest()[:12]
    out = ARM64 / f"rootfs-{SUITE}-{key}"
    if (out / ".complete").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # mmdebstrap's tar, cached on its own: the slow step (Debian's arm64 packages installed
    # through qemu-user, the initramfs built), which a change of the init script need not redo
    archive = ARM64 / f"mmdebstrap-{SUITE}-{packages}.tar"
    if not archive.exists():
        log(f"mmdebstrap --arch=arm64 {SUITE} (through qemu-user: ~15-30 min, cached)")
        _run(["mmdebstrap", "--arch=arm64", "--variant=apt", "--format=tar", "--include=" + ",".join(ROOTFS_PACKAGES),
              SUITE, str(archive) + ".part", f"{matrix.MIRROR}/debian"])
        os.replace(str(archive) + ".part", archive)
    with tempfile.TemporaryDirectory(dir=ARM64) as tmp:
        tree = Path(tmp) / "root"
        tree.mkdir()
        _run(["tar", "-xf", str(archive), "-C", str(tree), "--numeric-owner"])
        vmlinuz = sorted((tree / "boot").glob("vmlinuz-*"))
        initrd = sorted((tree / "boot").glob("initrd.img-*"))
        if not vmlinuz or not initrd:
            raise SystemExit(f"arm64: the root filesystem has no kernel or initramfs in /boot: {vmlinuz} {initrd}")
        release = vmlinuz[-1].name.removeprefix("vmlinuz-")
        shutil.copy(vmlinuz[-1], out / vmlinuz[-1].name)
        shutil.copy(initrd[-1], out / "initrd.img")
        (out / "release").write_text(release + "\n")
        init = tree / "sbin" / "hs-init"
        init.write_text(HS_INIT)
        init.chmod(0o755)
        log(f"mke2fs -d: the {ROOTFS_SIZE} root image (kernel {release})")
        _run(["mke2fs", "-q", "-t", "ext4", "-L", "hsroot", "-d", str(tree), str(out / "root.img"), ROOTFS_SIZE])
    (out / ".complete").touch()
    return out


# ---- the payload -----------------------------------------------------------------------------

def _site_packages(python: str) -> Path:
    """hotstack's dependencies as PyPI's aarch64 wheels for the guest's python, cached."""
    key = hashlib.sha256(("\n".join(matrix.DEPENDENCIES) + python).encode()).hexdigest()[:12]
    target = ARM64 / f"site-{python}-{key}"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        log(f"pip install the aarch64 wheels of hotstack's dependencies for python {python}")
        nodot = python.replace(".", "")
        _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "--only-binary=:all:",
              "--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64",
              "--platform", "manylinux_2_17_aarch64", "--python-version", python, "--implementation", "cp",
              "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none", *matrix.DEPENDENCIES])
        (target / ".complete").touch()
    return target


def _hotstack_wheel(work: Path) -> Path:
    """hotstack installed from a wheel of this tree (pure Python: any platform)."""
    wheels = work / "wheel"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(ROOT)])
    wheel = next(wheels.glob("hotstack-*.whl"))
    site = work / "hotstack-site"
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)])
    if not list((site / "hotstack" / "bpf").glob("*.arm64.bpf.o")):
        raise SystemExit("arm64: the wheel has no arm64 BPF objects (make bpf)")
    return site


def build_payload(work: Path, only: list[str] | None) -> Path:
    workloads = work / "workloads"
    workloads.mkdir(parents=True, exist_ok=True)
    matrix._build_workloads(workloads, cc=CROSS_CC)
    guest = work / "guest.sh"
    args = " ".join(f"--only '{item}'" for item in only or [])
    guest.write_text(GUEST_SH.format(args=args, item_timeout=ITEM_TIMEOUT))
    payload = work / "payload.tar"
    drop = lambda t: None if "__pycache__" in t.name or t.name.endswith(".complete") else t  # noqa: E731
    with tarfile.open(payload, "w") as tar:
        tar.add(_site_packages(GUEST_PYTHON[SUITE]), arcname="site", filter=drop)
        site = _hotstack_wheel(work)
        for entry in site.iterdir():
            if entry.name != "bin":
                tar.add(entry, arcname=f"site/{entry.name}", filter=drop)
        tar.add(HERE / "smoke.py", arcname="smoke.py")
        tar.add(guest, arcname="guest.sh")
        tar.add(workloads, arcname="workloads")
    # a disk is read in whole sectors
    with open(payload, "ab") as f:
        f.write(b"\0" * (-payload.stat().st_size % 512 + 512 * 16))
    return payload


# ---- the VM ----------------------------------------------------------------------------------

def run_vm(rootfs: Path, payload: Path, work: Path) -> tuple[dict | None, float, str]:
    release = (rootfs / "release").read_text().strip()
    root = work / "root.img"
    _run(["cp", "--sparse=always", str(rootfs / "root.img"), str(root)])
    console = work / "console.log"
    argv = ["qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a72", "-smp", "2", "-m", "2048",
            "-kernel", str(rootfs / f"vmlinuz-{release}"), "-initrd", str(rootfs / "initrd.img"),
            "-append", "root=/dev/vda rw console=ttyAMA0 init=/sbin/hs-init panic=-1",
            "-drive", f"file={root},if=virtio,format=raw",
            "-drive", f"file={payload},if=virtio,format=raw,readonly=on",
            "-display", "none", "-monitor", "none", "-serial", f"file:{console}", "-no-reboot"]
    log(f"booting {release} in qemu-system-aarch64 (TCG)")
    start = time.monotonic()
    try:
        subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        log(f"no end after {TIMEOUT} s")
    seconds = time.monotonic() - start
    text = console.read_text(errors="replace") if console.exists() else ""
    tail = "\n".join(text.strip().splitlines()[-15:])
    dumped = work / "results.json"
    subprocess.run(["debugfs", "-R", f"dump /hs-results/results.json {dumped}", str(root)],
                   capture_output=True, text=True)
    if not dumped.exists() or not dumped.stat().st_size:
        return None, seconds, tail
    try:
        return json.loads(dumped.read_text()), seconds, tail
    except json.JSONDecodeError:
        return None, seconds, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", choices=matrix.ITEMS, help="run only these items (repeatable)")
    parser.add_argument("--results", type=Path, default=None, help="also write the table to this file")
    args = parser.parse_args()
    for tool in ("qemu-system-aarch64", "mmdebstrap", CROSS_CC, "mke2fs", "debugfs"):
        if not shutil.which(tool):
            log(f"{tool} is not installed: run HOTSTACK_ARM64=1 bash .ci/install.d/arm64.sh")
            return 2
    ARM64.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rootfs = build_rootfs()
    release = (rootfs / "release").read_text().strip()
    work = ARM64 / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    payload = build_payload(work, args.only)
    log(f"payload {payload.stat().st_size >> 20} MiB; root filesystem and payload took "
        f"{time.monotonic() - started:.0f} s")
    results, seconds, tail = run_vm(rootfs, payload, work)
    if results is None:
        log(f"no results; the console's tail:\n{tail}")
    label = f"arm64 {SUITE} ({release})"
    text = matrix.table([(label, results, seconds)])
    total = time.monotonic() - started
    print(text)
    print(f"\narm64 wall time: {total / 60:.1f} min")
    if args.results:
        args.results.write_text(text + f"\n\nwall time: {total / 60:.1f} min\n")
    expected = json.loads((HERE / "expected.json").read_text())
    bad = matrix.regressions(label, results, expected, args.only)
    for item in bad:
        print(f"arm64: REGRESSION: {item} passed before, now "
              f"{(results or {}).get('items', {}).get(item, {}).get('status', 'not run')}", file=sys.stderr)
    return 1 if bad or results is None else 0


if __name__ == "__main__":
    sys.exit(main())
