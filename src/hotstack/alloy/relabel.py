"""Relabeling rules (Prometheus semantics as Alloy applies them to targets).

Regexes are fully anchored (`^(?s:re)$`); replacements expand `$1`, `${1}`, `$name`,
`${name}` and `$$` the way Go's Regexp.Expand does (so `$1x` names a group `1x`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .schema import INT, STRING, Arg, ListOf, Schema

ACTIONS = ("replace", "keep", "drop", "keepequal", "dropequal", "hashmod", "labelmap", "labeldrop",
           "labelkeep", "lowercase", "uppercase")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_EXPAND = re.compile(r"\$(?:\$|\{([^}]*)\}|([a-zA-Z0-9_]+))")
DEFAULT_REGEX = "(.*)"


def compile_regex(pattern: str) -> re.Pattern:
    # RE2 spells \z for end-of-text; Python spells it \Z.
    try:
        return re.compile(f"^(?s:{pattern.replace(chr(92) + 'z', chr(92) + 'Z')})$")
    except re.error as e:
        raise ValueError(f"invalid regex {pattern!r}: {e}") from None


def expand(template: str, match: re.Match) -> str:
    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) if m.group(1) is not None else m.group(2)
        try:
            value = match.group(int(name)) if name.isdigit() else match.group(name)
        except IndexError:   # no such group: Go expands it to ""
            return ""
        return value or ""
    return _EXPAND.sub(one, template)


@dataclass
class Rule:
    source_labels: list[str]
    separator: str = ";"
    regex: str = DEFAULT_REGEX
    modulus: int = 0
    target_label: str = ""
    replacement: str = "$1"
    action: str = "replace"

    def __post_init__(self) -> None:
        self.compiled = compile_regex(self.regex)

    @classmethod
    def from_args(cls, args: dict) -> "Rule":
        rule = cls(source_labels=args["source_labels"] or [], separator=args["separator"], regex=args["regex"],
                   modulus=args["modulus"], target_label=args["target_label"], replacement=args["replacement"],
                   action=args["action"].lower())
        rule.validate(args.get("_set", set()))
        return rule

    def validate(self, explicitly_set: set[str]) -> None:
        a = self.action
        if a not in ACTIONS:
            raise ValueError(f"unknown relabel action {self.action!r} (one of {', '.join(ACTIONS)})")
        if a in ("replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal") and not self.target_label:
            raise ValueError(f"relabel action {a!r} requires 'target_label'")
        if a in ("lowercase", "uppercase") and "replacement" in explicitly_set:
            raise ValueError(f"'replacement' cannot be set with relabel action {a!r}")
        if a == "hashmod" and self.modulus <= 0:
            raise ValueError("relabel action 'hashmod' requires a 'modulus' greater than 0")
        if a in ("labeldrop", "labelkeep") and (self.source_labels or self.target_label or
                                                explicitly_set & {"modulus", "separator", "replacement"}):
            raise ValueError(f"relabel action {a!r} only takes 'regex'")
        if a in ("keepequal", "dropequal") and (explicitly_set & {"regex", "modulus", "replacement", "separator"}):
            raise ValueError(f"relabel action {a!r} only takes 'source_labels' and 'target_label'")


def apply_rules(labels: dict[str, str], rules: list[Rule]) -> dict[str, str] | None:
    """The relabeled labels, or None when a rule drops the target."""
    out = dict(labels)
    for rule in rules:
        out = _apply(out, rule)
        if out is None:
            return None
    return {k: v for k, v in out.items() if v != ""}


def _apply(labels: dict[str, str], r: Rule) -> dict[str, str] | None:
    val = r.separator.join(labels.get(name, "") for name in r.source_labels)
    a = r.action
    if a == "drop":
        return None if r.compiled.match(val) else labels
    if a == "keep":
        return labels if r.compiled.match(val) else None
    if a == "dropequal":
        return None if labels.get(r.target_label, "") == val else labels
    if a == "keepequal":
        return labels if labels.get(r.target_label, "") == val else None
    if a == "replace":
        m = r.compiled.match(val)
        if m is None:
            return labels
        target = expand(r.target_label, m)
        value = expand(r.replacement, m)
        if not _LABEL_NAME.match(target):
            return labels
        if value == "":
            labels.pop(target, None)
        else:
            labels[target] = value
        return labels
    if a in ("lowercase", "uppercase"):
        labels[r.target_label] = val.lower() if a == "lowercase" else val.upper()
        return labels
    if a == "hashmod":
        import hashlib      # here: its import loads OpenSSL (content_hash.py), for this action alone
        digest = hashlib.md5(val.encode()).digest()
        labels[r.target_label] = str(int.from_bytes(digest[8:16], "big") % r.modulus)
        return labels
    if a == "labelmap":
        for name, value in list(labels.items()):
            m = r.compiled.match(name)
            if m is not None:
                labels[expand(r.replacement, m)] = value
        return labels
    if a == "labeldrop":
        return {k: v for k, v in labels.items() if not r.compiled.match(k)}
    if a == "labelkeep":
        return {k: v for k, v in labels.items() if r.compiled.match(k)}
    raise AssertionError(a)


RULE_SCHEMA = Schema(track_set=True, items=[
    Arg("source_labels", ListOf(STRING), None),
    Arg("separator", STRING, ";"),
    Arg("regex", STRING, DEFAULT_REGEX),
    Arg("modulus", INT, 0),
    Arg("target_label", STRING, ""),
    Arg("replacement", STRING, "$1"),
    Arg("action", STRING, "replace"),
])
RULE_SCHEMA.validate = Rule.from_args   # invalid regex or action: reported at the rule block
