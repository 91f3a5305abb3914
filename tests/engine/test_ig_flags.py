"""`hotstack run profile_cpu` with the flags users of `ig run` type: --filter, --fields, --sort,
-o jsonpretty|yaml, --map-fetch-count, --annotate with a list value, ig's field names."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from ..conftest import hotstack

pytestmark = pytest.mark.root


def json_values(text: str) -> list:
    """Every JSON value printed one after the other (jsonpretty prints one array per fetch)."""
    decoder, values, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        value, i = decoder.raw_decode(text, i)
        values.append(value)
        while i < len(text) and text[i].isspace():
            i += 1
    return values


def test_filter_fields_sort_as_yaml(hot_ab, workloads):
    a, b = workloads([hot_ab]), workloads([hot_ab])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(a.pid), "--pid", str(b.pid), "--timeout", "3",
                 "--sample-rate", "199", "-o", "yaml", "--filter", f"proc.pid=={b.pid},samples>=1",
                 "--fields", "proc.pid,samples,user_stack_raw.symbols", "--sort=-samples")
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d is not None]
    rows = [row for doc in docs for row in doc]
    assert len(rows) >= 2, r.stdout[:2000]
    assert {row["proc"]["pid"] for row in rows} == {b.pid}                 # --filter
    assert all(set(row) == {"proc", "samples", "user_stack_raw"} for row in rows)   # --fields, ig's names
    assert any("hot_a" in row["user_stack_raw"]["symbols"].split("; ") for row in rows)
    counts = [row["samples"] for row in docs[-1]]
    assert counts == sorted(counts, reverse=True)                       # --sort=-samples


def test_regex_filter_and_field_changes_as_jsonpretty(hot_ab, workloads):
    w = workloads([hot_ab])
    workloads(["dd", "if=/dev/zero", "of=/dev/null", "bs=1"])
    r = hotstack("run", "profile_cpu", "--host", "--map-fetch-interval", "0", "--comm", "hot_ab", "--comm", "dd", "--timeout", "2", "-o", "jsonpretty",
                 "--filter", "proc.comm~^hot_", "--fields=-kern_stack,-runtime.containerId")
    assert r.returncode == 0, r.stderr
    [rows] = json_values(r.stdout)          # one array, indented, for the one fetch
    assert "\n  {" in r.stdout
    # (other hot_ab processes may run on a shared machine: the filter is on the name)
    assert w.pid in {row["proc"]["pid"] for row in rows} and {row["proc"]["comm"] for row in rows} == {"hot_ab"}
    assert all("kern_stack" not in row and "containerId" not in row["runtime"] for row in rows)
    assert all("symbols" in row["user_stack_raw"] for row in rows)


def test_per_datasource_forms_of_output_fields_and_sort(hot_ab, workloads):
    """ig's `DS:VALUE` form (`-o samples:jsonpretty`, `--fields samples:...`, `--sort samples:...`)
    means the same as the bare value for the gadget's one datasource."""
    w = workloads([hot_ab])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "2",
                 "-o", "samples:jsonpretty", "--fields", "samples:proc.pid,samples", "--sort", "samples:-samples")
    assert r.returncode == 0, r.stderr
    [rows] = json_values(r.stdout)
    assert rows and all(set(row) == {"proc", "samples"} and row["proc"] == {"pid": w.pid} for row in rows), rows
    assert [row["samples"] for row in rows] == sorted((row["samples"] for row in rows), reverse=True)


def test_map_fetch_count_ends_the_run(hot_ab, workloads):
    w = workloads([hot_ab])
    started = time.monotonic()
    r = hotstack("run", "profile_cpu", "--pid", str(w.pid), "--timeout", "60", "--map-fetch-interval", "500ms",
                 "--map-fetch-count", "3", "-o", "jsonpretty")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - started < 30          # not the 60 s of --timeout
    assert len(json_values(r.stdout)) == 3, r.stdout[:2000]


def test_annotate_takes_a_list_value(hot_ab, workloads, tmp_path):
    """`samples:profiles.stack-fields=kern_stack,user_stack` is one annotation (ig's form), and the
    old name user_stack still names ig's user_stack_raw.symbols."""
    from hotstack.gadget.profile_cpu import samples_datasource
    ds = samples_datasource()
    ds.annotate(["samples:profiles.stack-fields=user_stack_raw.symbols,kern_stack,samples.proc.comm:x=y"])
    assert ds.annotations["profiles.stack-fields"] == "user_stack_raw.symbols,kern_stack"
    assert ds.field("proc.comm").annotations["x"] == "y"
    assert ds.field("user_stack") is ds.field("user_stack_raw.symbols")

    w = workloads([hot_ab])
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--pid", str(w.pid), "--timeout", "1", "-o", "folded",
                 "--annotate", "samples:profiles.stack-fields=kern_stack,user_stack")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("argv,message", [
    (["--filter", "nosuch==1"], "has no such field"),
    (["--filter", "proc.pid==abc"], "not a number"),
    (["--filter", "proc.comm"], "expected FIELD OP VALUE"),
    (["--sort", "samples"], "-o json"),
    (["-o", "jsonpretty", "--fields", "+samples,proc.pid"], "not both"),
    (["-c", "a,!b"], "not both"),
    (["--map-fetch-count", "-1"], "--map-fetch-count"),
    (["-o", "json", "--fields", "other:proc.pid"], "no data source 'other'"),
    (["-o", "samples:json;json"], "mixed values with and without specifying data source"),
])
def test_bad_row_flags_are_one_line(argv, message):
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1", *argv)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
