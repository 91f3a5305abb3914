"""pyroscope.write: push profiles to Pyroscope endpoints (Connect protocol), with external labels."""

from __future__ import annotations

import time
import weakref

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily

from ...errors import ConfigError
from ...export.delivery import FLUSH_DEADLINE_S, close_together
from ...export.pyroscope import PushSeries, PyroscopeEndpoint, PyroscopePusher
from ...profile.model import Profile
from ..component import Component, register
from ..schema import BOOL, DURATION, INT, SECRET, STRING, Arg, BlockArg, MapOf, Schema
from ..secret import redact_url, reveal
from .httpclient import HTTP_CLIENT, HTTPClientConfig, new_transport, validate_http_client
from .receiver import ProfilesReceiver

# Alloy's default; it times debug-info uploads, which hotstack does not make (pyroscope.ebpf
# refuses debug_info.upload = true), so another value has no effect and is said so at start.
DEBUG_INFO_UPLOAD_TIMEOUT = 120.0

ENDPOINT = Schema([
    Arg("url", STRING, required=True), Arg("name", STRING, ""), Arg("remote_timeout", DURATION, 10.0),
    Arg("headers", MapOf(SECRET), {}), Arg("min_backoff_period", DURATION, 0.5),
    Arg("max_backoff_period", DURATION, 300.0), Arg("max_backoff_retries", INT, 10),
    Arg("retry_on_http_429", BOOL, True), Arg("debug_info_upload_timeout", DURATION, DEBUG_INFO_UPLOAD_TIMEOUT),
    *HTTP_CLIENT,   # Alloy's whole HTTP client block: auth, oauth2, tls_config (mTLS), proxy, redirects
], validate=lambda a: _validate_endpoint(a))


def _validate_endpoint(a: dict) -> None:
    validate_http_client(a)
    try:
        to_endpoint(a).validate()
    except ConfigError as e:
        raise ValueError(str(e)) from None


def to_endpoint(a: dict, tracing: dict | None = None) -> PyroscopeEndpoint:
    """The push client's endpoint, its connections and credentials from Alloy's HTTP client
    settings (read at each request: rotated files and expired oauth2 tokens are picked up)."""
    client = HTTPClientConfig(a)
    tracing = tracing or {"jaeger_propagator": False, "trace_context_propagator": False}
    return PyroscopeEndpoint(
        url=a["url"], name=a["name"], headers={k: reveal(v) for k, v in a["headers"].items()},
        remote_timeout_s=a["remote_timeout"], min_backoff_s=a["min_backoff_period"],
        max_backoff_s=a["max_backoff_period"], max_backoff_retries=a["max_backoff_retries"],
        retry_on_http_429=a["retry_on_http_429"],
        transport=lambda timeout: new_transport(a["url"], timeout, client), transport_key=client.tls_files,
        client_headers=client.headers, follow_redirects=a["follow_redirects"], enable_http2=a["enable_http2"],
        server_name=client.server_name(),
        jaeger_propagator=tracing["jaeger_propagator"], trace_context_propagator=tracing["trace_context_propagator"])


# Alloy wraps each component's registerer with these labels; hotstack has no modules, so every
# component sits at the root path.
COMPONENT_LABELS = ["component_id", "component_path"]
ROOT_PATH = "/"


class WriteCollector:
    """pyroscope_write_* counters, read at scrape time from every live pusher, named and labelled
    as Alloy's (`endpoint` is the endpoint's URL, as there)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.components: "weakref.WeakSet[PyroscopeWrite]" = weakref.WeakSet()
        # Alloy's histogram: type push_total (endpoint "-": one Append, every endpoint),
        # push_endpoint (all the tries of one request), push_downstream (one attempt).
        self.latency = Histogram("pyroscope_write_latency", "Write latency for sending profiles to pyroscope",
                                 [*COMPONENT_LABELS, "endpoint", "type"], registry=registry)

    def collect(self):
        names = (("sent_bytes", "sent_bytes", "Total number of compressed bytes sent to Pyroscope."),
                 ("sent_profiles", "sent_items", "Total number of profiles sent to Pyroscope."),
                 ("dropped_bytes", "dropped_bytes", "Total number of compressed bytes dropped by Pyroscope."),
                 ("dropped_profiles", "dropped_items", "Total number of profiles dropped by Pyroscope."),
                 ("retries", "retries", "Total number of retries to Pyroscope."),
                 ("errors", "errors", "Failed push attempts (hotstack's; not in Alloy)."))
        # Summed per (component, endpoint URL): two endpoint blocks of one URL (one Pyroscope,
        # two tenants) are one series, as Alloy's counter vectors keyed by URL make them.
        totals: dict[tuple[str, str, str], dict[str, int]] = {}
        for comp in list(self.components):
            for pusher in comp.pushers:
                snap = pusher.metrics.snapshot()
                row = totals.setdefault((comp.id, ROOT_PATH, endpoint_label(pusher.endpoint.url)), {})
                for _name, key, _help in names:
                    row[key] = row.get(key, 0) + snap[key]
        for name, key, help_ in names:
            fam = CounterMetricFamily(f"pyroscope_write_{name}", help_, labels=[*COMPONENT_LABELS, "endpoint"])
            for labels, row in sorted(totals.items()):
                fam.add_metric(list(labels), row[key])
            yield fam


def endpoint_label(url: str) -> str:
    """The endpoint label: its URL as Alloy labels it, with any password in it hidden."""
    return redact_url(url)


_COLLECTORS: "weakref.WeakKeyDictionary[CollectorRegistry, WriteCollector]" = weakref.WeakKeyDictionary()


@register
class PyroscopeWrite(Component):
    name = "pyroscope.write"
    schema = Schema([BlockArg("endpoint", ENDPOINT, repeated=True), Arg("external_labels", MapOf(STRING), {}),
                     BlockArg("tracing", Schema([Arg("jaeger_propagator", BOOL, True),
                                                 Arg("trace_context_propagator", BOOL, True)]))])

    def __init__(self, controller, label):
        super().__init__(controller, label)
        self.receiver = ProfilesReceiver(self.id, self._append, self._append_many)
        self.exports = {"receiver": self.receiver}
        self.pushers: list[PyroscopePusher] = []
        self.profiles_in = 0
        self._collector: WriteCollector | None = None
        registry = controller.metrics_registry
        if registry is not None:
            collector = _COLLECTORS.get(registry)
            if collector is None:
                collector = _COLLECTORS[registry] = WriteCollector(registry)
                registry.register(collector)
            collector.components.add(self)
            self._collector = collector

    def update(self, args: dict) -> None:
        old = self.args
        self.args = args
        for e in args["endpoint"]:
            if e["debug_info_upload_timeout"] != DEBUG_INFO_UPLOAD_TIMEOUT:
                self.log.warning("%s: endpoint %s: debug_info_upload_timeout: no effect (it times debug-info "
                                 "uploads, which hotstack does not make)", self.id, endpoint_label(e["url"]))
        if self.controller.running and old and (old["endpoint"] != args["endpoint"] or
                                                old["tracing"] != args["tracing"]):
            self._replace_pushers()

    def _replace_pushers(self) -> None:
        old, self.pushers = self.pushers, [PyroscopePusher(to_endpoint(e, self.args["tracing"]), logger=self.log,
                                                           on_health=self._endpoint_health,
                                                           on_latency=self._latency_observer(e["url"]))
                                           for e in self.args["endpoint"]]
        close_together([p.close for p in old], FLUSH_DEADLINE_S)
        self._endpoint_health("")

    def _latency_observer(self, url: str):
        if self._collector is None:
            return None
        histogram, labels = self._collector.latency, (self.id, ROOT_PATH, endpoint_label(url))
        return lambda kind, seconds: histogram.labels(*labels, kind).observe(seconds)

    def _endpoint_health(self, _error: str) -> None:
        """Unhealthy while an endpoint fails (as Alloy's component reports it), healthy again when
        every endpoint accepts. Called by the pushers when an endpoint starts or stops failing."""
        failing = [p for p in self.pushers if p.failing]
        if failing:
            self.set_health("unhealthy", "; ".join(f"endpoint {p.endpoint.display_name}: {p.failing}"
                                                   for p in failing))
        elif self.health.state == "unhealthy" and not self.eval_error:
            self.set_health("healthy", "every endpoint accepts profiles")

    def start(self) -> None:
        self._replace_pushers()

    def _append(self, labels: dict[str, str], raw: bytes, profile: Profile | None) -> bool:
        return self._append_many([(labels, raw, profile)])[0]

    def _append_many(self, items: list[tuple[dict[str, str], bytes, Profile | None]]) -> list[bool]:
        """Profiles handed over together (pyroscope.ebpf's of one interval, one per target): sent
        in as few push requests as their sizes allow (PyroscopePusher.push_many), not one each."""
        started = time.monotonic()
        self.profiles_in += len(items)
        series = [PushSeries({**labels, **self.args["external_labels"]}, raw) for labels, raw, _profile in items]
        oks = [True] * len(series)
        for pusher in self.pushers:
            oks = [ok and queued for ok, queued in zip(oks, pusher.push_many(series))]
        if self._collector is not None:   # queued, never sent on this thread: this is the queueing time
            self._collector.latency.labels(self.id, ROOT_PATH, "-", "push_total").observe(time.monotonic() - started)
        return oks

    def stop(self) -> None:
        close_together([p.close for p in self.pushers], self.controller.flush_time_left(FLUSH_DEADLINE_S))

    def debug_info(self) -> dict:
        return {"profiles_received": self.profiles_in,
                "endpoints": [{"name": p.endpoint.display_name, "pending": p.pending(),
                               "held_bytes": p.held_bytes, "failing": p.failing, **p.metrics.snapshot()}
                              for p in self.pushers]}
