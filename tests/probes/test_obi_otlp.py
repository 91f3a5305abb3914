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


def test_pprof_sample_labels():
    p = PprofProfile.FromString(gzip.decompress(encode_pprof(_profile())))
    strings = list(p.string_table)
    labelled = [{strings[lab.key]: strings[lab.str] for lab in s.label} for s in p.sample]
    assert any(lab.get("trace_id") == TRACE and lab.get("span_id") == SPAN for lab in labelled)
    assert any("trace_id" not in lab for lab in labelled)
