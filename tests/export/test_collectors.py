"""Real OpenTelemetry Collectors, one per OTLP profiles layout, decode what `profile_cpu` exports.

One run of the known workload exports with six exporters at once (three layouts, gzip and none).
Each collector prints what it decoded (debug exporter) and re-encodes it to a Python receiver, so
both its text and its re-encoded data are checked: frames, sample counts, attributes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hotstack.gadget.igconfig import DEFAULT_PROTOCOL_VERSION

from ..conftest import hotstack
from .collectors import COLLECTORS, Collector, collector_binary, debug_samples
from .conftest import SEED_GUIDE_CONFIG, pprof
from .otlp_receiver import LayoutReceiver, OfficialReceiver, resolve
from .pprof_raw import parse_raw

pytestmark = pytest.mark.root

HZ = 99
PERIOD = 10**9 // HZ
VERSIONS = tuple(COLLECTORS)
DEFAULT_VERSION = DEFAULT_PROTOCOL_VERSION   # an exporter block's layout without protocol-version

def guide_config(endpoint: str, version: str) -> str:
    """The guide's ig-config.yaml for a receiver of this layout: as written, plus the one
    `protocol-version` line the README gives where the receiver is not of the default layout."""
    config = SEED_GUIDE_CONFIG.format(endpoint=endpoint)
    return config if version == DEFAULT_VERSION else config + f"        protocol-version: {version}\n"


@pytest.fixture(scope="module")
def collectors(tmp_path_factory):
    for v in VERSIONS:
        collector_binary(v)   # fail (CI) or skip early when one is missing
    workdir = tmp_path_factory.mktemp("otelcol")
    started = {}
    try:
        for v in VERSIONS:
            receiver = OfficialReceiver() if v == "v1.10" else LayoutReceiver(v)
            started[v] = (Collector(v, workdir, forward_to=receiver.endpoint), receiver)
        yield started
    finally:
        for collector, receiver in started.values():
            collector.stop()
            receiver.stop()


def exporters_config(collectors) -> str:
    blocks = []
    for v, (collector, _) in collectors.items():
        for compression in ("gzip", "none"):
            blocks.append(f"""\
      {v}-{compression}:
        exporter: otlp-grpc
        compression: {compression}
        endpoint: "{collector.endpoint}"
        insecure: true
        protocol-version: {v}
""")
    return "operator:\n  otel-profiles:\n    exporters:\n" + "".join(blocks)


def test_each_collector_decodes_the_workload(collectors, export_busy, workloads, tmp_path, go_pprof):
    config = tmp_path / "ig-config.yaml"
    config.write_text(exporters_config(collectors))
    names = ",".join(f"{v}-{c}" for v in VERSIONS for c in ("gzip", "none"))
    w = workloads([export_busy])
    pb = tmp_path / "run.pb.gz"
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "3", "--sample-rate", str(HZ),
                 "--config", str(config), "--otel-profiles-exporter", names, "-o", "pprof", "--file", str(pb))
    assert r.returncode == 0, r.stderr
    assert "dropped" not in r.stderr, r.stderr
    raw = parse_raw(pprof(go_pprof, "-raw", str(pb)))
    count = sum(s["values"][0] for s in raw.samples) // PERIOD
    assert count > 0

    for v, (collector, receiver) in collectors.items():
        # The collector's own decoding, as its debug exporter prints it.
        text = collector.wait_for("proc.comm", "export_busy", total=2 * count)
        ours = [s for s in debug_samples(text) if s["attributes"].get("proc.comm") == "export_busy"]
        assert sum(sum(s["values"]) for s in ours) == 2 * count, (v, collector.log_path, r.stderr)
        for name in ("export_leaf", "export_outer", "__x64_sys_getppid", str(export_busy), "service.name"):
            assert name in text, (v, name)
        assert "hotstack" in text
        # What it decoded, encoded again by the collector: frames in order, counts, attributes.
        # Each request it forwards is a whole copy of one of ours. (Its exporter may resend one
        # after a failed attempt: at least two, each complete.)
        requests = receiver.wait_for(2)
        assert len(requests) >= 2, (v, len(requests))
        assert all(sum(s["value"] for s in resolve(req)) == count for req in requests), \
            (v, [sum(s["value"] for s in resolve(req)) for req in requests], count)
        samples = [s for req in requests for s in resolve(req)]
        assert all(s["attributes"] == {"proc.comm": "export_busy"} for s in samples), v
        assert any(s["frames"][:3] == ["export_leaf", "export_outer", "main"] for s in samples), v
        assert all(s["resource"]["service.name"] == "hotstack" for s in samples)


def test_seed_guide_config_verbatim_except_the_endpoint(collectors, export_busy, workloads, tmp_path):
    collector, receiver = collectors[DEFAULT_VERSION]
    (tmp_path / "ig-config.yaml").write_text(SEED_GUIDE_CONFIG.format(endpoint=collector.endpoint))
    workloads([export_busy])
    before = len(receiver.requests)
    # `sudo ig run profile_cpu --otel-profiles-exporter=my-profiles-exporter --config=ig-config.yaml`,
    # stopped by --timeout instead of Ctrl-C, with --host: the guide's workload runs in a container,
    # this one on the host (without --host only container processes are profiled, as by ig).
    r = subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--host",
                        "--otel-profiles-exporter=my-profiles-exporter", "--config=ig-config.yaml", "--timeout", "3"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "SAMPLES" in r.stdout                          # the usual table is still printed
    # ig's default --map-fetch-interval (1000ms): an export each second (with 0 there would be one)
    assert len(receiver.wait_for(before + 2)) >= before + 2, len(receiver.requests) - before
    text = collector.wait_for("proc.comm", "export_busy")
    assert any(s["attributes"].get("proc.comm") == "export_busy" for s in debug_samples(text))
    assert "export_leaf" in text


def test_sanitized_attribute_names_reach_the_collector(collectors, export_busy, workloads, tmp_path):
    collector, receiver = collectors["v1.10"]    # (0.139's debug exporter prints ints as Go's %!s)
    (tmp_path / "ig-config.yaml").write_text(guide_config(collector.endpoint, "v1.10"))
    w = workloads([export_busy])
    before = len(receiver.requests)
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "2", "-o", "none",
                 "--config", str(tmp_path / "ig-config.yaml"), "--otel-profiles-exporter", "my-profiles-exporter",
                 "--otel-profiles-sanitize-labels", "--annotate", "samples.proc.pid:profiles.sample-attribute=true")
    assert r.returncode == 0, r.stderr
    text = collector.wait_for("proc_comm", "export_busy")
    ours = [s for s in debug_samples(text) if s["attributes"].get("proc_comm") == "export_busy"]
    assert ours and all(s["attributes"].get("proc_pid") == str(w.pid) for s in ours)
    requests = receiver.wait_for(before + 1)[before:]
    samples = [s for req in requests for s in resolve(req)]
    assert samples and all(s["attributes"] == {"proc_comm": "export_busy", "proc_pid": w.pid} for s in samples)
    assert samples[0]["resource"]["service.name"] == "hotstack"     # resource names keep their dots


def test_seed_guide_with_pyroscope_1_15_as_written(collectors, export_busy, workloads, tmp_path):
    """The guide's Pyroscope 1.15 speaks the v1.8 layout (Collector 0.139 here): the guide's
    ig-config.yaml works with it as written, unchanged. A newer receiver needs one line, as the
    README says (protocol-version: v1.10 for Pyroscope >= 1.20): that line against Collector 0.165."""
    collector, _ = collectors["v1.8"]
    (tmp_path / "ig-config.yaml").write_text(SEED_GUIDE_CONFIG.format(endpoint=collector.endpoint))
    workloads([export_busy])     # on the host, hence --host (the guide's runs in a container)
    r = subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--host",
                        "--otel-profiles-exporter=my-profiles-exporter", "--config=ig-config.yaml", "--timeout", "3"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = collector.wait_for("proc.comm", "export_busy")
    ours = [s for s in debug_samples(text) if s["attributes"].get("proc.comm") == "export_busy"]
    assert ours and sum(sum(s["values"]) for s in ours) > 0
    assert "export_leaf" in text
    newer, _ = collectors["v1.10"]
    (tmp_path / "ig-config.yaml").write_text(guide_config(newer.endpoint, "v1.10"))
    r = subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu", "--host",
                        "--otel-profiles-exporter=my-profiles-exporter", "--config=ig-config.yaml", "--timeout", "3"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "export_leaf" in newer.wait_for("proc.comm", "export_busy")
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "protocol-version: v1.10" in readme and "Pyroscope 1.15" in readme


def _with_libraries(programs: dict[str, str]) -> dict[str, Path]:
    """Image paths -> host files: each program and the shared libraries ldd names for it."""
    files = {}
    for inside, host in programs.items():
        files[inside] = Path(os.path.realpath(host))
        out = subprocess.run(["ldd", host], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"(/\S+) \(0x", out):
            files[lib] = Path(os.path.realpath(lib))
    return files


@pytest.fixture(scope="module")
def guide_image(_docker_engine_session) -> str:
    """What the guide's `busybox sh -c "cat /dev/random > /dev/null"` needs, as an image: a shell
    and cat with their libraries, from this host (no registry is reachable here)."""
    files = _with_libraries({"/bin/sh": shutil.which("sh"), "/bin/cat": shutil.which("cat")})
    return _docker_engine_session.import_image("hotstack-guide-busybox", files)


@pytest.mark.parametrize("version", VERSIONS)
def test_seed_guide_end_to_end_with_its_container(collectors, docker_engine, guide_image, tmp_path, version):
    """The guide's steps, for each receiver layout: its ig-config.yaml (the receiver's endpoint,
    plus `protocol-version` where the receiver is not the guide's layout: one line, as the README says), its
    `ig run profile_cpu --otel-profiles-exporter=my-profiles-exporter --config=ig-config.yaml`
    without --host, and its container `mycontainer` running `sh -c "cat /dev/random > /dev/null"`.
    The receiver gets the container's samples with the attributes the guide filters by
    (runtime.containerName, proc.comm) and nothing from the host: ig's default scope."""
    collector, _ = collectors[version]
    (tmp_path / "ig-config.yaml").write_text(guide_config(collector.endpoint, version))
    docker_engine.run(guide_image, "mycontainer", ["sh", "-c", "cat /dev/random > /dev/null"])
    start = len(collector.output())
    r = subprocess.run([sys.executable, "-m", "hotstack", "run", "profile_cpu",
                        "--otel-profiles-exporter=my-profiles-exporter", "--config=ig-config.yaml", "--timeout", "4"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "DOCKER_HOST": docker_engine.host})
    assert r.returncode == 0, r.stderr
    collector.wait_for("runtime.containerName", "mycontainer", total=10)
    samples = debug_samples(collector.output()[start:])
    ours = [s for s in samples if s["attributes"].get("runtime.containerName") == "mycontainer"]
    assert sum(sum(s["values"]) for s in ours) >= 10, (version, samples[:5], r.stderr)
    assert {s["attributes"].get("proc.comm") for s in ours} == {"cat"}, ours[:5]
    assert all(s["attributes"].get("runtime.containerName") for s in samples), \
        [s for s in samples if not s["attributes"].get("runtime.containerName")][:5]   # no host process


def test_annotate_stack_fields_list_picks_the_exported_frames(collectors, export_busy, workloads, tmp_path):
    """`--annotate samples:profiles.stack-fields=kern_stack,user_stack` (a list, ig's form; user_stack
    is the old name of user_stack_raw.symbols) exports kernel then user frames; `=kern_stack` the
    kernel frames alone."""
    collector, receiver = collectors["v1.10"]
    (tmp_path / "ig-config.yaml").write_text(guide_config(collector.endpoint, "v1.10"))
    w = workloads([export_busy])
    exported = {}
    for fields in ("kern_stack,user_stack", "kern_stack"):
        before = len(receiver.requests)
        r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "3",
                     "--sample-rate", str(HZ), "-o", "none", "--config", str(tmp_path / "ig-config.yaml"),
                     "--otel-profiles-exporter", "my-profiles-exporter",
                     "--annotate", f"samples:profiles.stack-fields={fields}")
        assert r.returncode == 0, r.stderr
        requests = receiver.wait_for(before + 1)[before:]
        exported[fields] = [s["frames"] for req in requests for s in resolve(req)]
        assert exported[fields], (fields, r.stderr)
    both, kernel = exported["kern_stack,user_stack"], exported["kern_stack"]
    assert any("__x64_sys_getppid" in f and "main" in f and f.index("main") > f.index("__x64_sys_getppid")
               for f in both), both[:5]   # kernel frames first, then the user stack
    assert any("export_leaf" in f for f in both)
    user = {"export_leaf", "export_outer", "export_syscalls", "main", "__libc_start_call_main", "_start"}
    assert any(f for f in kernel) and not [f for f in kernel if user & set(f)], kernel[:5]
    assert any("__x64_sys_getppid" in f for f in kernel), kernel[:20]
