"""A Python OTLP profiles receiver for tests.

`OfficialReceiver` is built only on the official `opentelemetry-proto` package (layout v1.10): its
generated gRPC servicer and messages, none of hotstack's code. `LayoutReceiver` takes the layout of
an older collector's re-export (v1.8, v1.9) from hotstack's generated modules.
`resolve()` turns a request back into samples: frame names (leaf first), value, attributes.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

SERVICE = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"


class _Base:
    def __init__(self, tls: tuple[bytes, bytes] | None = None) -> None:
        """`tls`: (PEM key, PEM certificate) to serve TLS instead of plaintext."""
        self.requests: list = []
        self.metadata: list[dict] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        if tls is not None:
            self.port = self.server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([tls]))
        else:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"127.0.0.1:{self.port}"

    def _record(self, request, context) -> None:
        with self._lock:
            self.requests.append(request)
            self.metadata.append(dict(context.invocation_metadata()))

    def wait_for(self, n: int = 1, timeout: float = 15) -> list:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if len(self.requests) >= n:
                    return list(self.requests)
            time.sleep(0.05)
        with self._lock:
            return list(self.requests)

    def stop(self) -> None:
        self.server.stop(grace=None)


class OfficialReceiver(_Base):
    def __init__(self, tls: tuple[bytes, bytes] | None = None) -> None:
        super().__init__(tls)
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc as svc_grpc

        receiver = self

        class Servicer(svc_grpc.ProfilesServiceServicer):
            def Export(self, request, context):
                receiver._record(request, context)
                return svc.ExportProfilesServiceResponse()

        svc_grpc.add_ProfilesServiceServicer_to_server(Servicer(), self.server)
        self.server.start()


class LayoutReceiver(_Base):
    def __init__(self, version: str) -> None:
        super().__init__()
        from hotstack.profile.otlp.encode import MODULES

        pb = MODULES[version]

        def export(request, context):
            self._record(request, context)
            return pb.ExportProfilesServiceResponse()

        handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=pb.ExportProfilesServiceRequest.FromString,
                                                      response_serializer=pb.ExportProfilesServiceResponse.SerializeToString)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        self.server.start()


def _any(value, strings=()):
    kind = value.WhichOneof("value")
    if kind == "string_value_strindex":   # v1.10: strings of profiles may point into the string table
        return strings[value.string_value_strindex]
    return getattr(value, kind) if kind else None


def _key(kv, strings) -> str:
    # v1.10 lets KeyValue name its key by index into the string table (key_strindex).
    return kv.key or (strings[kv.key_strindex] if getattr(kv, "key_strindex", 0) else "")


def resolve(request) -> list[dict]:
    """Every sample of every profile: {"frames": [...leaf first], "value": int, "attributes": {...},
    "resource": {...}, "profile": Profile message}."""
    d = request.dictionary
    strings = list(d.string_table)

    def attrs(indices):
        out = {}
        for i in indices:
            kv = d.attribute_table[i]
            out[strings[kv.key_strindex]] = _any(kv.value, strings)
        return out

    def frames(stack_index):
        names = []
        for li in d.stack_table[stack_index].location_indices:
            loc = d.location_table[li]
            lines = loc.lines if hasattr(loc, "lines") else loc.line
            for line in lines:
                names.append(strings[d.function_table[line.function_index].name_strindex])
        return names

    out = []
    for rp in request.resource_profiles:
        resource = {_key(kv, strings): _any(kv.value, strings) for kv in rp.resource.attributes}
        for sp in rp.scope_profiles:
            for profile in sp.profiles:
                samples = profile.samples if hasattr(profile, "samples") else profile.sample
                for s in samples:
                    out.append({"frames": frames(s.stack_index), "value": sum(s.values),
                                "attributes": attrs(s.attribute_indices), "resource": resource,
                                "profile": profile, "strings": strings})
    return out
