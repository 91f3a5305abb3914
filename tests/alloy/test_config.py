"""The component graph and `hotstack agent --validate`: the seed examples, and bad input as one
clear line with file:line:column and exit code 2."""

from __future__ import annotations

import pytest

from hotstack.alloy.controller import load_config

from ..conftest import hotstack
from .conftest import CONFIGS, seed_config


def validate(tmp_path, text: str):
    cfg = tmp_path / "c.alloy"
    cfg.write_text(text)
    return hotstack("agent", "--validate", str(cfg), timeout=60), str(cfg)


@pytest.mark.parametrize("name", ["kubernetes.alloy", "docker.alloy"])
def test_seed_examples_validate_verbatim(name):
    r = hotstack("agent", "--validate", str(CONFIGS / name), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "OK (4 components)" in r.stdout


def test_seed_example_with_beyla_names_what_is_missing():
    r = hotstack("agent", "--validate", str(CONFIGS / "beyla_process.alloy"), timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "beyla_process.alloy:1:1: component 'beyla.ebpf' is not implemented by hotstack" in lines[0]


def test_seed_process_part_validates(tmp_path):
    text = seed_config("beyla_process.alloy")
    start = text.index('discovery.process "all"')
    text = text[start:].replace("<PYROSCOPE_URL>", "http://127.0.0.1:4040")
    r, _ = validate(tmp_path, text)
    assert r.returncode == 0, r.stderr


def test_graph_order_and_exports():
    c = load_config(seed_config("kubernetes.alloy"), "k.alloy")
    assert c.order.index("discovery.kubernetes.all_pods") < c.order.index("discovery.relabel.local_pods") < \
        c.order.index("pyroscope.ebpf.local_pods")
    assert c.order.index("pyroscope.write.endpoint") < c.order.index("pyroscope.ebpf.local_pods")
    ebpf = c.component("pyroscope.ebpf.local_pods")
    assert ebpf.args["sample_rate"] == 19 and ebpf.args["collect_interval"] == 15.0
    assert ebpf.args["targets_only"] is True and ebpf.args["comm"] == "none"
    assert c.dependents("discovery.kubernetes.all_pods") == ["discovery.relabel.local_pods",
                                                            "pyroscope.ebpf.local_pods"]


W = 'pyroscope.write "w" {\n  endpoint {\n    url = "http://127.0.0.1:4040"\n  }\n}\n'

BAD = [
    ("syntax", 'pyroscope.write "w" {\n  endpoint {\n    url = "http://x\n  }\n}\n', "c.alloy:3:11: string literal not terminated"),
    ("unknown component", 'discovery.nope "x" {}\n', "c.alloy:1:1: component 'discovery.nope' is not implemented"),
    ("unknown component 2", 'foo.bar "x" {}\n', "c.alloy:1:1: unknown component 'foo.bar'"),
    ("unknown argument", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  sampel_rate = 3\n}\n',
     "c.alloy:8:3: pyroscope.ebpf.e: unrecognized argument 'sampel_rate'"),
    ("unknown block", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  rule {}\n}\n',
     "c.alloy:8:3: pyroscope.ebpf.e: unrecognized block 'rule'"),
    ("wrong type", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  sample_rate = "97"\n}\n',
     "c.alloy:8:17: pyroscope.ebpf.e: argument 'sample_rate': expected number, got string"),
    ("wrong capsule", 'discovery.process "p" {}\npyroscope.ebpf "e" {\n  forward_to = [discovery.process.p.targets]\n}\n',
     "c.alloy:3:16: pyroscope.ebpf.e: argument 'forward_to': element 0: expected ProfilesReceiver, got array"),
    ("bad duration", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  collect_interval = "15 s"\n}\n',
     "invalid duration '15 s'"),
    ("missing forward_to", 'pyroscope.ebpf "e" {\n  targets = []\n}\n',
     "c.alloy:1:1: pyroscope.ebpf.e: missing required argument 'forward_to'"),
    ("missing component", 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.nope.receiver]\n}\n',
     "c.alloy:2:17: component 'pyroscope.write.nope' does not exist"),
    ("cycle", 'discovery.relabel "a" {\n  targets = discovery.relabel.b.output\n}\n'
              'discovery.relabel "b" {\n  targets = discovery.relabel.a.output\n}\n',
     "cycle between components: discovery.relabel.a -> discovery.relabel.b -> discovery.relabel.a"),
    ("self reference", 'discovery.relabel "a" {\n  targets = discovery.relabel.a.output\n}\n', "refers to itself"),
    ("invalid regex", 'discovery.relabel "a" {\n  targets = []\n  rule {\n    regex = "(["\n    target_label = "x"\n  }\n}\n',
     "c.alloy:3:3: discovery.relabel.a > rule: invalid regex '(['"),
    ("duplicate", 'discovery.process "a" {}\ndiscovery.process "a" {}\n', "c.alloy:2:1: component 'discovery.process.a' is declared more than once"),
    ("no label", 'discovery.process {}\n', "must have a label"),
    ("bad comm", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  comm = "pid"\n}\n',
     "comm: 'pid' is not one of none, label, stackframe, both"),
    ("not supported yet", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  load_probe = true\n}\n',
     "load_probe: not supported yet (hotstack has no generic probe program for others to attach)"),
    ("no symbol cache", W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n  symb_cache_size = 1\n}\n',
     "symb_cache_size: not supported yet (hotstack has no on-disk symbol cache)"),
    ("bad url", 'pyroscope.write "w" {\n  endpoint {\n    url = "pyroscope:4040"\n  }\n}\n', "expected http(s)://"),
    ("k8s role", 'discovery.kubernetes "k" {\n  role = "service"\n}\n', "role 'service': not supported yet"),
    ("two auth methods", 'discovery.kubernetes "k" {\n  role = "pod"\n  bearer_token = "t"\n  basic_auth {\n'
                         '    username = "u"\n  }\n}\n', "at most one authentication method"),
    ("tls half a pair", 'discovery.docker "d" {\n  host = "tcp://h:2376"\n  tls_config {\n    cert_file = "c"\n'
                        '  }\n}\n', "needs both a certificate and a key"),
    ("selector role", 'discovery.kubernetes "k" {\n  role = "pod"\n  selectors {\n    role = "service"\n  }\n}\n',
     "does not match the component role"),
    ("docker host", 'discovery.docker "d" {\n  host = "/var/run/docker.sock"\n}\n', "must be a unix://"),
    ("server_name and proxy", 'pyroscope.write "w" {\n  endpoint {\n    url = "https://p:4040"\n'
                              '    proxy_url = "http://proxy:3128"\n    tls_config {\n      server_name = "p.test"\n'
                              '    }\n  }\n}\n', "tls_config.server_name: not supported through a proxy yet"),
    ("top attribute", 'x = 1\n', "c.alloy:1:1: unexpected attribute 'x'"),
]


@pytest.mark.parametrize("name,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, name, text, message):
    # In-process through the CLI's main() (the same code a user runs, without a Python start each).
    from hotstack.cli import main
    path = str(tmp_path / "c.alloy")
    (tmp_path / "c.alloy").write_text(text)
    code = main(["agent", "--validate", path])
    err = capsys.readouterr().err
    r = type("R", (), {"returncode": code, "stderr": err, "stdout": ""})
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hotstack: error: ")
    assert message.replace("c.alloy", path) in lines[0], lines[0]
    assert "Traceback" not in r.stderr


def test_deprecated_argument_warns_once(tmp_path):
    r, _ = validate(tmp_path, W + 'pyroscope.ebpf "e" {\n  forward_to = [pyroscope.write.w.receiver]\n'
                                  '  pid_cache_size = 64\n}\n')
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("'pid_cache_size' is deprecated and has no effect") == 1


def test_every_documented_argument_is_declared():
    from hotstack.alloy.components.ebpf_args import DEPRECATED, SCHEMA
    documented = ("forward_to targets collect_interval sample_rate python_enabled perl_enabled php_enabled "
                  "hotspot_enabled ruby_enabled v8_enabled dotnet_enabled go_enabled demangle off_cpu_threshold "
                  "bpf_fs_root obi_process_context_enabled load_probe probe_links verbose_mode lazy_mode "
                  "no_kernel_version_check comm pid_label kernel_frames targets_only symb_cache_path "
                  "symb_cache_size reporter_unsymbolized_stubs debug_info").split()
    for name in documented:
        assert SCHEMA.arg(name) is not None, name
    assert SCHEMA.arg("u_probe_links") is not None and "collect_kernel_profile" in DEPRECATED


def test_missing_config_file():
    r = hotstack("agent", "--validate", "/nonexistent/x.alloy", timeout=60)
    assert r.returncode == 2 and "cannot read config /nonexistent/x.alloy" in r.stderr


def test_reevaluation_updates_dependents():
    c = load_config('discovery.relabel "a" {\n  targets = [{"x" = "1"}]\n}\n'
                    'discovery.relabel "b" {\n  targets = discovery.relabel.a.output\n  rule {\n'
                    '    source_labels = ["x"]\n    target_label = "y"\n  }\n}\n', "r.alloy")
    c.start()
    try:
        a = c.component("discovery.relabel.a")
        a.publish(output=[{"x": "2"}, {"x": "3"}])
        import time
        for _ in range(50):
            if len(c.component("discovery.relabel.b").exports["output"]) == 2:
                break
            time.sleep(0.05)
        assert c.component("discovery.relabel.b").exports["output"] == [{"x": "2", "y": "2"}, {"x": "3", "y": "3"}]
    finally:
        c.stop()


def test_failed_reevaluation_marks_unhealthy_and_keeps_last_arguments():
    import time
    c = load_config('discovery.relabel "a" {\n  targets = [{"x" = "1"}]\n}\n'
                    'discovery.relabel "b" {\n  targets = [{"y" = discovery.relabel.a.output[0]["x"]}]\n}\n', "r.alloy")
    c.start()
    try:
        a, b = c.component("discovery.relabel.a"), c.component("discovery.relabel.b")
        a.publish(output=[])          # b's expression now indexes an empty array
        for _ in range(100):
            if b.health.state == "unhealthy":
                break
            time.sleep(0.05)
        assert b.health.state == "unhealthy"
        assert b.health.message.startswith("r.alloy:5:") and "out of range" in b.health.message
        assert b.exports["output"] == [{"y": "1"}]     # the last good evaluation stays
        a.publish(output=[{"x": "2"}])
        for _ in range(100):
            if b.health.state == "healthy":
                break
            time.sleep(0.05)
        assert b.health.state == "healthy" and b.exports["output"] == [{"y": "2"}]
    finally:
        c.stop()


def test_validate_lists_every_component_error(tmp_path):
    r, path = validate(tmp_path, 'pyroscope.ebpf "a" {\n  forward_to = []\n  sample_rate = "x"\n}\n'
                                 'discovery.relabel "r" {\n  targets = 3\n}\n'
                                 'discovery.relabel "s" {\n  targets = discovery.relabel.r.output\n}\n')
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [f"hotstack: error: {path}:3:17: pyroscope.ebpf.a: argument 'sample_rate': expected number, "
                     "got string",
                     f"{path}:6:13: discovery.relabel.r: argument 'targets': expected list(map(string)), got number"]


def test_seed_placeholder_examples_validate_once_filled(tmp_path):
    """The usage and probes examples hold placeholders (<LABEL>, <TARGET_LIST>): filled in, they validate."""
    for name in ("usage.alloy", "probes.alloy"):
        text = (CONFIGS / name).read_text().replace('"<LABEL>"', '"main"').replace("<TARGET_LIST>", "[]")
        text = text.replace("<RECEIVER_LIST>", "[pyroscope.write.w.receiver]") + W
        r, _ = validate(tmp_path, text)
        assert r.returncode == 0, (name, r.stderr)
