"""Bad input to the exporter flags and ig-config.yaml: one line on stderr, exit code 2, no traceback.

Config errors come before any privilege check, so these run without root and without sampling.
Most cases call the CLI's `main()` in this process (the same code path, minus interpreter start-up);
one runs it as a separate process, as a user would.
"""

from __future__ import annotations

import pytest

from hotstack.errors import ConfigError
from hotstack.gadget.datasource import DataSource, Field
from hotstack.gadget.otel_profiles import OtelProfilesOperator, attribute_fields

from ..conftest import hotstack
from .conftest import SEED_GUIDE_CONFIG

GOOD = SEED_GUIDE_CONFIG.format(endpoint="127.0.0.1:4317")


def run_with(cli, tmp_path, config_text: str | None, *flags: str):
    args = ["run", "profile_cpu", "--map-fetch-interval", "0", "--timeout", "1"]
    if config_text is not None:
        path = tmp_path / "ig-config.yaml"
        path.write_text(config_text)
        args += ["--config", str(path)]
    return cli(*args, *flags)


def assert_one_line(r, *fragments: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


CASES = {
    "invalid YAML": (GOOD.replace('endpoint: "127.0.0.1:4317"', 'endpoint: [127.0.0.1:4317'),
                     ("my-profiles-exporter",), ("invalid YAML", "line")),
    "unknown exporter name": (GOOD, ("nope",), ("no exporter 'nope'", "my-profiles-exporter")),
    "unknown exporter type": (GOOD.replace("otlp-grpc", "otlp-http"), ("my-profiles-exporter",),
                              ("unsupported profile exporter 'otlp-http'", "otlp-grpc")),
    "bad compression": (GOOD.replace("gzip", "zstd"), ("my-profiles-exporter",),
                        ("unsupported profile compression 'zstd'",)),
    "endpoint without port": (GOOD.replace('"127.0.0.1:4317"', '"127.0.0.1"'), ("my-profiles-exporter",),
                              ("endpoint '127.0.0.1'", "host:port")),
    "bad protocol version": (GOOD.replace("insecure: true", "insecure: true\n        protocol-version: v1.7"),
                             ("my-profiles-exporter",), ("protocol-version 'v1.7'", "v1.8, v1.9, v1.10")),
    "insecure not a bool": (GOOD.replace("insecure: true", "insecure: maybe"), ("my-profiles-exporter",),
                            ("insecure must be true or false",)),
    "mixed flag forms": (GOOD, ("samples:my-profiles-exporter,my-profiles-exporter",), ("mixed values",)),
    "unknown datasource in flag": (GOOD, ("other:my-profiles-exporter",), ("no datasource 'other'",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_config_is_one_line_exit_2(cli, tmp_path, case):
    text, exporter, fragments = CASES[case]
    r = run_with(cli, tmp_path, text, "--otel-profiles-exporter", exporter[0])
    assert_one_line(r, *fragments)


def test_missing_config_file_as_a_user_runs_it(tmp_path):
    r = hotstack("run", "profile_cpu", "--map-fetch-interval", "0", "--config", str(tmp_path / "absent.yaml"),
                 "--otel-profiles-exporter", "my-profiles-exporter", timeout=60)
    assert_one_line(r, "absent.yaml", "no such file")


def test_exporter_without_config_file(cli):
    assert_one_line(cli("run", "profile_cpu", "--map-fetch-interval", "0", "--otel-profiles-exporter", "my-profiles-exporter"), "needs --config")


def test_pprof_and_flamegraph_need_a_file(cli):
    assert_one_line(cli("run", "profile_cpu", "-o", "pprof"), "--file")
    assert_one_line(cli("run", "profile_cpu", "-o", "flamegraph"), "--file")
    assert_one_line(cli("run", "profile_cpu", "--map-fetch-interval", "0", "-o", "columns", "--file", "x"), "--file")


def test_file_in_missing_directory(cli, tmp_path):
    r = cli("run", "profile_cpu", "--map-fetch-interval", "0", "-o", "pprof", "--file", str(tmp_path / "no" / "x.pb.gz"))
    assert_one_line(r, "does not exist")


def test_annotations_missing_for_export(cli, tmp_path):
    r = run_with(cli, tmp_path, GOOD, "--otel-profiles-exporter", "my-profiles-exporter",
                 "--annotate", "samples:profiles.value-field=")
    assert_one_line(r, "profiles.value-field")


def _datasource(*names: str) -> DataSource:
    attr = {"profiles.sample-attribute": "true"}
    return DataSource("samples", [Field("stack", "string"), Field("count", "uint64"),
                                  *(Field(n, "string", dict(attr)) for n in names)],
                      {"profiles.stack-fields": "stack", "profiles.value-field": "count"})


def test_sanitize_collision_names_both_fields():
    ds = _datasource("k8s.podName", "k8s_podName")
    # Without sanitizing the names differ, so both are exported.
    assert [a.name for a in attribute_fields(ds, sanitize=False)] == ["k8s.podName", "k8s_podName"]
    with pytest.raises(ConfigError) as e:
        OtelProfilesOperator(ds, [], sanitize=True)
    message = str(e.value)
    assert "'k8s.podName'" in message and "'k8s_podName'" in message and "\n" not in message


def test_sanitize_renames_sample_attributes_only():
    ds = _datasource("k8s.namespace", "proc.comm")
    op = OtelProfilesOperator(ds, [], sanitize=True)
    [sample] = op.samples_from_rows([{"stack": "a; b; ", "count": 3, "k8s.namespace": "prod", "proc.comm": "x"}])
    assert [f.name for f in sample.stack] == ["a", "b"]      # the trailing "; " gives no empty frame
    assert sample.value == 3
    assert dict(sample.labels) == {"k8s_namespace": "prod", "proc_comm": "x"}
