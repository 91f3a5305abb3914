"""OBI trace/span labels become OTLP profile links and pprof sample labels (no BPF needed)."""

from __future__ import annotations

import gzip

import pytest

from hotstack.profile.model import Frame, Profile, Sample
from hotstack.profile.otlp import VERSIONS, encode_profile
from hotstack.profile.otlp.encode import MODULES
from hotstack.profile.pprof import encode_pprof
from hotstack.profile.pprof_pb2 import Profile as PprofProfile

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def _profile() -> Profile:
    stack = (Frame("work"), Frame("main"))
    traced = Sample(stack, 7, 10, 11, "app", (("trace_id", TRACE), ("span_id", SPAN)))
    plain = Sample(stack, 5, 10, 12, "app")
    return Profile([traced, plain], start_ns=1, duration_ns=2, frequency_hz=49)


@pytest.mark.parametrize("version", VERSIONS)
def test_otlp_link_per_traced_sample(version):
    pb = MODULES[version]
    request = pb.ExportProfilesServiceRequest.FromString(encode_profile(_profile(), version))
    links = request.dictionary.link_table
    assert links[0].trace_id == b"" and len(links) == 2
    assert (links[1].trace_id.hex(), links[1].span_id.hex()) == (TRACE, SPAN)
    profile = request.resource_profiles[0].scope_profiles[0].profiles[0]
    samples = profile.sample if version == "v1.8" else profile.samples
    by_link = {s.link_index: s.values[0] for s in samples}
    assert by_link == {1: 7, 0: 5}
    strings = list(request.dictionary.string_table)
    keys = {strings[a.key_strindex] for a in request.dictionary.attribute_table[1:]}
    assert "trace_id" not in keys and "span_id" not in keys   # a link, not an attribute


@pytest.mark.parametrize("version", ["v1.8", "v1.9"])
def test_otlp_link_as_the_layouts_collector_reads_it(version, tmp_path):
    """Decoded by the real collector of the layout (not hotstack's .proto files): the span is a link
    of the dictionary, and no sample carries it as an attribute."""
    from tests.export.collectors import debug_dictionary, debug_samples, decode_with_collector

    out = decode_with_collector(version, encode_profile(_profile(), version), tmp_path / version)
    assert (TRACE, SPAN) in debug_dictionary(out)["links"], out[-3000:]
    samples = debug_samples(out)
    assert sorted(s["values"][0] for s in samples) == [5, 7]
    assert all(set(s["attributes"]) == {"proc.comm"} for s in samples), samples


def test_otlp_link_as_the_official_package_reads_it():
    """v1.10 through the official opentelemetry-proto messages."""
    from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import \
        ExportProfilesServiceRequest

    request = ExportProfilesServiceRequest.FromString(encode_profile(_profile(), "v1.10"))
    links = request.dictionary.link_table
    assert [(link.trace_id.hex(), link.span_id.hex()) for link in links] == [("", ""), (TRACE, SPAN)]
    samples = request.resource_profiles[0].scope_profiles[0].profiles[0].samples
    assert {s.link_index: s.values[0] for s in samples} == {1: 7, 0: 5}


def test_pprof_sample_labels():
    p = PprofProfile.FromString(gzip.decompress(encode_pprof(_profile())))
    strings = list(p.string_table)
    labelled = [{strings[lab.key]: strings[lab.str] for lab in s.label} for s in p.sample]
    assert any(lab.get("trace_id") == TRACE and lab.get("span_id") == SPAN for lab in labelled)
    assert any("trace_id" not in lab for lab in labelled)
