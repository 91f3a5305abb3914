"""discovery.relabel: each action, anchoring, ${1} expansion, defaults and bad rules, table-driven."""

from __future__ import annotations

import hashlib

import pytest

from hotstack.alloy.controller import load_config
from hotstack.alloy.relabel import RULE_SCHEMA, Rule, apply_rules
from hotstack.errors import ConfigError

BASE = {"__meta_kubernetes_namespace": "prod", "__meta_kubernetes_pod_container_name": "api",
        "__meta_kubernetes_pod_label_app": "shop", "__meta_kubernetes_pod_label_tier": "web",
        "__meta_kubernetes_pod_phase": "Running", "job": "Mixed", "a": "x", "b": "x"}


def rule(**kw) -> Rule:
    args = RULE_SCHEMA.defaults()
    args.update(kw)
    args["_set"] = set(kw)
    return Rule.from_args(args)


def _hashmod(value: str, modulus: int) -> str:
    return str(int.from_bytes(hashlib.md5(value.encode()).digest()[8:16], "big") % modulus)


CASES = [
    # (name, rule arguments, expected changes: dict of label -> value, None = label absent, "DROP" = target dropped)
    ("replace default regex copies", dict(source_labels=["job"], target_label="j"), {"j": "Mixed"}),
    ("replace two groups with ${n}", dict(source_labels=["__meta_kubernetes_namespace",
                                                         "__meta_kubernetes_pod_container_name"],
                                          separator="@", regex="(.*)@(.*)", replacement="ebpf/${1}/${2}",
                                          target_label="service_name"), {"service_name": "ebpf/prod/api"}),
    ("replace is anchored: partial match is no match", dict(source_labels=["job"], regex="Mix",
                                                             target_label="j", replacement="hit"), {"j": None}),
    ("replace $1x names group '1x' (empty)", dict(source_labels=["job"], regex="(.*)", target_label="j",
                                                   replacement="$1x"), {"j": None}),
    ("replace $$ is a dollar", dict(source_labels=["job"], regex="(.*)", target_label="j",
                                    replacement="$$${1}"), {"j": "$Mixed"}),
    ("replace named group", dict(source_labels=["job"], regex="(?P<first>M)(.*)", target_label="j",
                                 replacement="${first}-$2"), {"j": "M-ixed"}),
    ("replace target from group", dict(source_labels=["job"], regex="(M)(.*)", target_label="t_$2",
                                       replacement="v"), {"t_ixed": "v"}),
    ("replace empty value deletes", dict(source_labels=["missing"], regex="(.*)", target_label="job"),
     {"job": None}),
    ("replace invalid target is a no-op", dict(source_labels=["job"], target_label="1bad"), {"1bad": None}),
    ("replace dot matches newline", dict(source_labels=["nl"], regex="a.b", target_label="n", replacement="ok"),
     {"n": "ok"}),
    ("keep matching", dict(action="keep", source_labels=["__meta_kubernetes_pod_phase"], regex="Running"), {}),
    ("keep non matching drops", dict(action="keep", source_labels=["__meta_kubernetes_pod_phase"],
                                     regex="Succeeded|Failed"), "DROP"),
    ("drop matching", dict(action="drop", source_labels=["__meta_kubernetes_pod_phase"], regex="Running|Failed"),
     "DROP"),
    ("drop is anchored", dict(action="drop", source_labels=["__meta_kubernetes_pod_phase"], regex="Run"), {}),
    ("keepequal equal", dict(action="keepequal", source_labels=["a"], target_label="b"), {}),
    ("keepequal different drops", dict(action="keepequal", source_labels=["a"], target_label="job"), "DROP"),
    ("dropequal equal drops", dict(action="dropequal", source_labels=["a"], target_label="b"), "DROP"),
    ("dropequal different", dict(action="dropequal", source_labels=["a"], target_label="job"), {}),
    ("hashmod", dict(action="hashmod", source_labels=["job"], modulus=7, target_label="shard"),
     {"shard": _hashmod("Mixed", 7)}),
    ("labelmap", dict(action="labelmap", regex="__meta_kubernetes_pod_label_(.+)"),
     {"app": "shop", "tier": "web", "__meta_kubernetes_pod_label_app": "shop"}),
    ("labelmap with replacement", dict(action="labelmap", regex="__meta_kubernetes_pod_label_(.+)",
                                       replacement="k8s_${1}"), {"k8s_app": "shop"}),
    ("labeldrop", dict(action="labeldrop", regex="__meta_kubernetes_pod_label_.*"),
     {"__meta_kubernetes_pod_label_app": None, "__meta_kubernetes_pod_label_tier": None, "job": "Mixed"}),
    ("labelkeep", dict(action="labelkeep", regex="a|b"), {"job": None, "a": "x", "b": "x",
                                                          "__meta_kubernetes_namespace": None}),
    ("lowercase", dict(action="lowercase", source_labels=["job"], target_label="low"), {"low": "mixed"}),
    ("uppercase", dict(action="uppercase", source_labels=["job", "a"], target_label="up"), {"up": "MIXED;X"}),
]


@pytest.mark.parametrize("name,args,want", CASES, ids=[c[0] for c in CASES])
def test_relabel_actions(name, args, want):
    labels = {**BASE, "nl": "a\nb"}
    out = apply_rules(labels, [rule(**args)])
    if want == "DROP":
        assert out is None
        return
    assert out is not None
    for k, v in want.items():
        assert out.get(k) == v, (k, out)
    assert labels == {**BASE, "nl": "a\nb"}, "input labels must not be modified"


def test_rules_run_in_order_and_stop_at_drop():
    rules = [rule(source_labels=["job"], target_label="x", replacement="1"),
             rule(action="drop", source_labels=["x"], regex="1"),
             rule(source_labels=["job"], target_label="never")]
    assert apply_rules(BASE, rules) is None


@pytest.mark.parametrize("args,message", [
    (dict(action="replace"), "requires 'target_label'"),
    (dict(action="hashmod", target_label="x"), "'modulus'"),
    (dict(action="lowercase", target_label="x", replacement="y"), "'replacement' cannot be set"),
    (dict(action="labeldrop", source_labels=["a"]), "only takes 'regex'"),
    (dict(action="keepequal", target_label="x", regex="a"), "only takes 'source_labels' and 'target_label'"),
    (dict(action="explode"), "unknown relabel action"),
    (dict(regex="(unclosed", target_label="x"), "invalid regex"),
])
def test_bad_rules(args, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        rule(**args)


def test_relabel_component_in_a_pipeline():
    cfg = '''
discovery.relabel "first" {
  targets = [{"__meta_x" = "a", "keep" = "yes"}, {"__meta_x" = "b", "keep" = "no"}]
  rule {
    action = "keep"
    source_labels = ["keep"]
    regex = "yes"
  }
  rule {
    source_labels = ["__meta_x"]
    target_label = "x"
  }
}
discovery.relabel "second" {
  targets = discovery.relabel.first.output
  rule {
    action = "uppercase"
    source_labels = ["x"]
    target_label = "X"
  }
}
'''
    c = load_config(cfg, "t.alloy")
    assert c.component("discovery.relabel.second").exports["output"] == [
        {"__meta_x": "a", "keep": "yes", "x": "a", "X": "A"}]


def test_invalid_regex_in_config_is_located():
    cfg = 'discovery.relabel "r" {\n  targets = []\n  rule {\n    regex = "a(b"\n    target_label = "x"\n  }\n}\n'
    with pytest.raises(ConfigError) as err:
        load_config(cfg, "r.alloy")
    assert str(err.value).startswith("r.alloy:3:3: discovery.relabel.r > rule: invalid regex 'a(b'")
