"""The runtime matrix: each language runtime of Debian's suites, profiled in a plain chroot, a Docker
container and a mount namespace of its own.

    python3 tests/runtimes/matrix.py [--suite trixie ...] [--runtime python ...] [--mode chroot ...]
    python3 tests/runtimes/matrix.py --record          # expected.json from the last run's results
    python3 tests/runtimes/matrix.py --write-versions  # README table + runtimes/versions.py from expected.json
    python3 tests/runtimes/matrix.py --check-versions  # exit 1 if they do not match expected.json

The root filesystems are `.ci/install.d/rootfs.sh`'s (mmdebstrap, one tar per suite under
$HOTSTACK_CACHE/rootfs/, keyed by its package list), extracted once next to their tar. Each cell runs
one runtime's workload (matrix_workloads/: `hot_a` and `hot_b` called 3:1 by `work`, so 75/25 of the
CPU) and profiles it from the host in a process of its own (matrix_cell.py), two cells at a time. A cell:

  pass   the runtime's frames named (>= 90% of the work thread's samples), the hot_a/hot_b split
         within 5 points of 75/25, the native frames below reaching the process root (>= 90%);
  warns  no runtime frames, but hotstack said why (the process noted unread, `hotstack doctor --pid`
         explains it): a version it cannot read, never silent;
  FAIL   anything else, with the reason.

Every runtime of every suite runs in a plain chroot; the runtimes of FULL_SUITE also run in a Docker
container (an image imported from the suite's tar, cached by the tar's key in the matrix's own
dockerd data root) and in a mount namespace of their own (`unshare -m`, /proc mounted, chroot).
The exit code is 1 if a cell that expected.json says passes (or warns) did worse now, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))
ROOTFS = CACHE / "rootfs"
WORK = CACHE / "runtime-matrix"
RESULTS = WORK / "results.json"
EXPECTED = HERE / "expected.json"
WORKLOADS = HERE / "matrix_workloads"
INSIDE = "/hs-matrix"        # where the workloads are in each root

SUITES = {"bullseye": "Debian 11", "bookworm": "Debian 12", "trixie": "Debian 13", "sid": "Debian unstable"}
FULL_SUITE = "trixie"
MODES = ("chroot", "docker", "mntns")
# runtime -> (argv in the root, the command that prints its version, what the version looks like)
RUNTIMES = {
    "python": (["python3", "work.py"], ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]),
    "node": (["node", "work.js"], ["node", "-e", "console.log(process.versions.node.split('.')[0])"]),
    "ruby": (["ruby", "work.rb"], ["ruby", "-e", "print RUBY_VERSION.split('.')[0, 2].join('.')"]),
    "php": (["php", "work.php"], ["php", "-r", "echo PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION;"]),
    "perl": (["perl", "work.pl"], ["perl", "-e", "$^V =~ /(\\d+)\\.(\\d+)/; print qq($1.$2)"]),
    "java": (["java", "-Xshare:auto", "Work.java"],
             ["sh", "-c", "java -XshowSettings:properties -version 2>&1 | sed -n 's/ *java.specification.version = //p'"]),
}
STATES = ("pass", "warns", "FAIL")      # best first
PARALLEL = int(os.environ.get("HOTSTACK_RUNTIME_JOBS", "2"))


def log(message: str) -> None:
    print(f"runtimes: {message}", file=sys.stderr, flush=True)


def cells_of(suites: list[str], runtimes: list[str], modes: list[str]) -> list[tuple[str, str, str]]:
    """(runtime, suite, mode) of the matrix: every suite in a chroot, FULL_SUITE in every mode."""
    return [(r, s, m) for s in suites for r in runtimes for m in modes
            if m == "chroot" or s == FULL_SUITE]


def extracted(suite: str) -> Path:
    """The suite's root filesystem, extracted once from its cached tar (named by the tar's key), with
    the workloads copied in."""
    tar = ROOTFS / f"{suite}.tar"
    assert tar.exists(), f"{tar} is missing: .ci/install.d/rootfs.sh builds it (make test-peers)"
    root = ROOTFS / tar.resolve().stem
    if not (root / ".complete").exists():
        log(f"extracting {tar.resolve().name}")
        partial = root.with_name(root.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        partial.mkdir(parents=True)
        with tarfile.open(tar) as t:
            t.extractall(partial, filter="fully_trusted")
        (partial / ".complete").touch()
        subprocess.run(["rm", "-rf", str(root)], check=True)
        partial.rename(root)
    inside = root / INSIDE.lstrip("/")
    inside.mkdir(exist_ok=True)
    for f in WORKLOADS.iterdir():
        (inside / f.name).write_bytes(f.read_bytes())
    return root


def version_of(root: Path, runtime: str) -> str:
    r = subprocess.run(["chroot", str(root), *RUNTIMES[runtime][1]], capture_output=True, text=True, timeout=120)
    return r.stdout.strip() or f"? ({r.stderr.strip()[:80]})"


# ---- Docker -----------------------------------------------------------------------------------

def docker_engine():
    """The matrix's own dockerd (tests/docker_engine.py), its data root kept under the cache: images
    imported once per root filesystem key."""
    sys.path.insert(0, str(ROOT))
    from tests.docker_engine import DockerEngine
    return DockerEngine(WORK / "docker")


def docker_image(engine, suite: str) -> str:
    key = (ROOTFS / f"{suite}.tar").resolve().stem
    name = f"hotstack-matrix/{key}:latest"
    if not engine.docker("images", "-q", name):
        log(f"docker import {key}")
        engine.docker("import", str((ROOTFS / f"{suite}.tar").resolve()), name, timeout=900)
    return name


# ---- cells -----------------------------------------------------------------------------------

def run_cell(runtime: str, suite: str, mode: str, root: Path, image: str, docker_host: str) -> dict:
    """One cell, profiled by matrix_cell.py in a process of its own; its result."""
    argv = [sys.executable, str(HERE / "matrix_cell.py"), "--runtime", runtime, "--mode", mode, "--root", str(root),
            "--image", image, "--docker-host", docker_host, "--name", f"hsm-{runtime}-{suite}-{mode}-{os.getpid()}"]
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}:{ROOT}")
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        out = proc.stdout.strip().splitlines()
        result = json.loads(out[-1]) if out and out[-1].startswith("{") else {
            "state": "FAIL", "detail": f"no result (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    except subprocess.TimeoutExpired:
        result = {"state": "FAIL", "detail": "no result in 300 s"}
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def run_matrix(cells: list[tuple[str, str, str]]) -> dict:
    """results[runtime][suite] = {"version": ..., mode: {state, detail, seconds, ...}}"""
    suites = sorted({s for _r, s, _m in cells}, key=list(SUITES).index)
    roots = {s: extracted(s) for s in suites}
    results: dict = {}
    for r, s, _m in cells:
        results.setdefault(r, {}).setdefault(s, {"version": None})
    engine, images = None, {}
    # /proc in each root, as chroots are set up (the JVM's launcher finds its libjli.so through
    # /proc/self/exe): mounted in the host's mount namespace, unmounted at the end.
    mounted = [root for root in roots.values() if not os.path.ismount(root / "proc")]
    for root in mounted:
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        if any(m == "docker" for _r, _s, m in cells):
            engine = docker_engine()
            images = {s: docker_image(engine, s) for s in {s for _r, s, m in cells if m == "docker"}}
        for r, s, _m in cells:
            if results[r][s]["version"] is None:
                results[r][s]["version"] = version_of(roots[s], r)

        def one(cell: tuple[str, str, str]) -> None:
            r, s, m = cell
            result = run_cell(r, s, m, roots[s], images.get(s, ""), engine.host if engine else "")
            results[r][s][m] = result
            log(f"{r} {results[r][s]['version']} ({s}) {m}: {result['state']} in {result['seconds']} s"
                f" {result.get('detail', '')[:200]}")

        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            list(pool.map(one, cells))
    finally:
        if engine is not None:
            engine.stop()
        for root in mounted:
            subprocess.run(["umount", "-l", str(root / "proc")], check=False)
    return results


# ---- verdict, table --------------------------------------------------------------------------

def regressions(results: dict, expected: dict) -> list[str]:
    """Cells run now that did worse than expected.json says (pass -> warns/FAIL, warns -> FAIL)."""
    bad = []
    for runtime, suites in results.items():
        for suite, row in suites.items():
            for mode in MODES:
                if mode not in row:
                    continue
                want = expected.get(runtime, {}).get(suite, {}).get(mode)
                got = row[mode]["state"]
                if want in STATES and STATES.index(got) > STATES.index(want):
                    bad.append(f"{runtime} {row.get('version')} ({suite}) {mode}: expected {want}, got {got}: "
                               f"{row[mode].get('detail', '')}")
    return bad


def table(results: dict) -> str:
    lines = ["| runtime | version | suite | " + " | ".join(MODES) + " |", "|---|---|---|" + "---|" * len(MODES)]
    for runtime in RUNTIMES:
        for suite in SUITES:
            row = results.get(runtime, {}).get(suite)
            if row is None:
                continue
            cells = []
            for mode in MODES:
                c = row.get(mode)
                if c is None:
                    cells.append("")
                    continue
                text = f"{c['state']} ({c['seconds']:.0f} s"
                if "split" in c:
                    text += f", {c['split']:.1f}% hot_a"
                text += ")"
                if c["state"] != "pass":
                    text += ": " + c.get("detail", "")[:160]
                cells.append(text.replace("|", "/").replace("\n", " "))
            lines.append(f"| {runtime} | {row.get('version')} | {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(results: dict) -> dict:
    """expected.json's content from results: each cell's state and each row's version."""
    out: dict = {}
    for runtime in RUNTIMES:
        for suite in SUITES:
            row = results.get(runtime, {}).get(suite)
            if row is None:
                continue
            entry = {"version": row["version"]}
            for mode in MODES:
                if mode in row:
                    entry[mode] = row[mode]["state"]
                    if row[mode]["state"] != "pass":
                        entry[f"{mode} detail"] = row[mode].get("detail", "")[:300]
            out.setdefault(runtime, {})[suite] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", action="append", choices=list(SUITES))
    parser.add_argument("--runtime", action="append", choices=list(RUNTIMES))
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--record", action="store_true", help="write expected.json from the last run's results")
    parser.add_argument("--write-versions", action="store_true", help="README table and runtimes/versions.py")
    parser.add_argument("--check-versions", action="store_true", help="exit 1 if they differ from expected.json")
    args = parser.parse_args()
    if args.record or args.write_versions or args.check_versions:
        from matrix_docs import main_docs    # noqa: PLC0415 (a sibling script)
        return main_docs(args)
    cells = cells_of(args.suite or list(SUITES), args.runtime or list(RUNTIMES), args.mode or list(MODES))
    missing = [s for s in args.suite or list(SUITES) if not (ROOTFS / f"{s}.tar").exists()]
    if missing:
        log(f"no root filesystem for {', '.join(missing)} in {ROOTFS}: .ci/install.d/rootfs.sh builds them")
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = run_matrix(cells)
    # Keep the cells of earlier runs not run now (a run of one suite keeps the others' last results).
    last = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for runtime, suites in results.items():
        for suite, row in suites.items():
            last.setdefault(runtime, {}).setdefault(suite, {}).update(row)
    RESULTS.write_text(json.dumps(last, indent=1))
    print(table(results))
    total = time.monotonic() - started
    print(f"\nruntime matrix: {len(cells)} cells, wall time {total / 60:.1f} min")
    bad = regressions(results, json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {})
    for line in bad:
        print(f"runtimes: REGRESSION: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
