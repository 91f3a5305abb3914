"""discovery.relabel: rewrite, keep or drop targets with rule blocks."""

from __future__ import annotations

from ..component import Component, register
from ..relabel import RULE_SCHEMA, Rule, apply_rules
from ..schema import TARGETS, Arg, BlockArg, Schema


@register
class DiscoveryRelabel(Component):
    name = "discovery.relabel"
    schema = Schema([Arg("targets", TARGETS, required=True), BlockArg("rule", RULE_SCHEMA, repeated=True)])
    initial_exports = {"output": [], "rules": []}

    def update(self, args: dict) -> None:
        rules = [Rule.from_args(r) for r in args["rule"]]
        output = [out for t in args["targets"] if (out := apply_rules(t, rules)) is not None]
        self.args = args
        self.publish(output=output, rules=[{k: v for k, v in r.items() if k != "_set"} for r in args["rule"]])

    def debug_info(self) -> dict:
        return {"targets_in": len(self.args.get("targets", [])), "targets_out": len(self.exports["output"])}
