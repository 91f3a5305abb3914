"""The OpenTelemetry Collectors that .ci/install.d/collectors.sh builds, one per OTLP profiles layout."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

from tests.conftest import stop_gently, wait_ready
from tests.peers import require_file

# layout -> collector version (the same table as .ci/install.d/collectors.sh)
COLLECTORS = {"v1.8": "0.139.0", "v1.9": "0.146.1", "v1.10": "0.165.0"}


def cache_dir() -> Path:
    return Path(os.environ.get("HOTSTACK_CACHE", "/var/cache/hotstack-ci"))


require_peer = require_file


def collector_binary(version: str) -> Path:
    return require_peer(cache_dir() / f"otelcol-{COLLECTORS[version]}" / "otelcol",
                        f"OpenTelemetry Collector {COLLECTORS[version]} (OTLP profiles {version})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONFIG = """\
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{port}
exporters:
  debug:
    verbosity: detailed
{forward}service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [debug{forward_name}]
"""
# A slow receiver on a loaded machine must not see the same export twice: no retries, and a
# timeout long enough that the first attempt is the only one.
FORWARD = """\
  {otlp}:
    endpoint: {endpoint}
    timeout: 60s
    retry_on_failure:
      enabled: false
    tls:
      insecure: true
"""


def otlp_exporter_type(binary: Path) -> str:
    """The OTLP/gRPC exporter is `otlp` in older collectors and `otlp_grpc` in newer ones."""
    listing = subprocess.run([str(binary), "components"], capture_output=True, text=True, timeout=60).stdout
    return "otlp_grpc" if "name: otlp_grpc" in listing else "otlp"


class Collector:
    """A real collector on a free loopback port, printing every profile it decodes (debug exporter)."""

    def __init__(self, version: str, workdir: Path, forward_to: str = "") -> None:
        """`forward_to`: also re-export what it decoded, over OTLP/gRPC, to this endpoint."""
        self.version = version
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        config = workdir / f"otelcol-{version}.yaml"
        otlp = otlp_exporter_type(collector_binary(version))
        config.write_text(CONFIG.format(
            port=self.port, forward=FORWARD.format(otlp=otlp, endpoint=forward_to) if forward_to else "",
            forward_name=f", {otlp}" if forward_to else ""))
        self.log_path = workdir / f"otelcol-{version}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen([str(collector_binary(version)), "--config", str(config),
                                      "--feature-gates=service.profilesSupport"],
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _listening(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
            return True

    def _wait_ready(self, timeout: float = 30) -> None:
        wait_ready(self.proc, self._listening, f"collector {self.version} on {self.endpoint}", self.output, timeout)

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_for(self, attribute: str, value: str, total: int = 1, timeout: float = 20) -> str:
        """The output once the samples with this attribute value add up to `total` (or the timeout)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.output()
            if sum(sum(s["values"]) for s in debug_samples(out) if s["attributes"].get(attribute) == value) >= total:
                return out
            time.sleep(0.2)
        return self.output()

    def stop(self) -> None:
        stop_gently(self.proc, 10)
        self._log.close()


_TYPED = re.compile(r"^(Str|Int|Bool|Double)\((.*)\)$")


def debug_samples(output: str) -> list[dict]:
    """Samples as the debug exporter printed them: {"values": [...], "attributes": {...}}."""
    samples: list[dict] = []
    current = None
    for line in output.splitlines():
        text = line.strip()
        if text.startswith("Sample #"):
            current = {"values": [], "attributes": {}}
            samples.append(current)
        elif current is not None and text.startswith("Values:"):
            current["values"] = [int(v) for v in text.split(":", 1)[1].strip(" []").split() if v]
        elif current is not None and text.startswith("-> ") and ": " in text:
            key, _, value = text[3:].partition(": ")
            current["attributes"][key] = _TYPED.sub(r"\2", value)   # newer versions print Str(x)
        elif current is not None and text and not text.startswith(("Attributes", "->", "Stack", "Link",
                                                                   "Timestamps", "Location")):
            current = None
    return samples


def debug_dictionary(output: str) -> dict:
    """The dictionary the debug exporter printed, read without hotstack's .proto files:
    {"strings": [...], "functions": [names], "links": [(trace id, span id)]}."""
    lines = output.splitlines()
    strings: list[str] = []
    function_name_indexes: list[int] = []
    links: list[tuple[str, str]] = []
    section = ""
    trace = None
    for line in lines:
        text = line.strip()
        if text in ("String table:", "Link table:", "Attribute table:") or text.startswith(("Function #", "Location #",
                                                                                             "Mapping #")):
            section = text
            continue
        if text.startswith("ResourceProfiles #"):
            section = ""
        if section == "String table:":
            if line.startswith("    "):
                strings.append(line[4:])      # index 0 is the empty string: an indented empty line
            else:
                section = ""
        elif section.startswith("Function #") and text.startswith("Name:"):
            function_name_indexes.append(int(text.split(":", 1)[1]))
        elif section == "Link table:" and text.startswith("-> Trace ID:"):
            trace = _TYPED.sub(r"\2", text.split(":", 1)[1].strip())
        elif section == "Link table:" and text.startswith("-> Span ID:"):
            links.append((trace, _TYPED.sub(r"\2", text.split(":", 1)[1].strip())))
    names = [strings[i] if 0 <= i < len(strings) else None for i in function_name_indexes]
    return {"strings": strings, "functions": names, "links": links}


def decode_with_collector(version: str, request: bytes, workdir: Path) -> str:
    """Send one serialized ExportProfilesServiceRequest to the real collector of its layout; its
    debug output, i.e. the request as that collector decoded it."""
    import grpc

    workdir.mkdir(parents=True, exist_ok=True)
    collector = Collector(version, workdir)
    try:
        with grpc.insecure_channel(collector.endpoint) as channel:
            export = channel.unary_unary(
                "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
                request_serializer=lambda b: b, response_deserializer=lambda b: b)
            export(request, timeout=30)
        end = time.monotonic() + 20
        while time.monotonic() < end and not debug_samples(collector.output()):
            time.sleep(0.2)
        return collector.output()
    finally:
        collector.stop()
