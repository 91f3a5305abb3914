"""What every OTLP profiles request we send must satisfy, whatever the receiver."""

from __future__ import annotations

from collections import Counter


def check_dictionary(request) -> None:
    d = request.dictionary
    assert d.string_table[0] == ""
    for table in ("mapping_table", "location_table", "function_table", "link_table", "attribute_table",
                  "stack_table"):
        entries = getattr(d, table)
        assert len(entries) >= 1 and entries[0].ByteSize() == 0, f"{table}[0] is not the zero entry"
    assert len(set(d.string_table)) == len(d.string_table), "duplicate strings"
    stacks = [tuple(s.location_indices) for s in d.stack_table]
    assert len(set(stacks)) == len(stacks), "duplicate stacks"
    functions = [(f.name_strindex, f.filename_strindex) for f in d.function_table]
    assert len(set(functions)) == len(functions), "duplicate functions"
    n = {t: len(getattr(d, t)) for t in ("mapping_table", "location_table", "function_table", "stack_table",
                                         "attribute_table")}
    for s in d.stack_table:
        assert all(0 < i < n["location_table"] for i in s.location_indices)
    for loc in d.location_table[1:]:
        assert 0 <= loc.mapping_index < n["mapping_table"]
        lines = loc.lines if hasattr(loc, "lines") else loc.line
        assert lines and all(0 < l.function_index < n["function_table"] for l in lines)
    for rp in request.resource_profiles:
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                samples = p.samples if hasattr(p, "samples") else p.sample
                ids = Counter((s.stack_index, tuple(sorted(s.attribute_indices)), s.link_index) for s in samples)
                assert max(ids.values(), default=1) == 1, "two samples with the same identity"
                for s in samples:
                    assert 0 < s.stack_index < n["stack_table"] and len(s.values) == 1 and s.values[0] > 0
                    assert all(0 < i < n["attribute_table"] for i in s.attribute_indices)


def profile_types(request) -> tuple[tuple[str, str], tuple[str, str], int]:
    s = request.dictionary.string_table
    p = request.resource_profiles[0].scope_profiles[0].profiles[0]
    return ((s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex]),
            (s[p.period_type.type_strindex], s[p.period_type.unit_strindex]), p.period)
