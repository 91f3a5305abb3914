"""The profile viewer: one self-contained HTML page (no external script, style or font: works offline).

What `-o flamegraph` writes and what the agent serves at `/` of its local store: a timeline of
samples per series (service or command), a flame graph and a table of functions side by side and
linked, search, label filters, a diff of two time ranges, downloads as pprof or folded. The page
gets its data as one JSON document (built here) and does everything else in the browser.

Data: profiles become Slices (a time span, a label set, samples as (stack, value)); stacks and
names are interned so a page of many intervals stays small:
    names:  [str]                         every frame name once
    frames: [[name index, kind]]          kind 0 user, 1 kernel, 2 root (the series: comm/service)
    stacks: [[frame index, ...]]          root first
    labels: [{key: value}]                label sets
    slices: [[start ms, duration ms, label set, [[stack, value], ...]]]
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .model import Profile, Sample

USER, KERNEL, ROOT = 0, 1, 2
MAX_LABEL_VALUES = 500      # a label with more values (pids ...) is not offered as a filter


@dataclass
class Slice:
    """Samples of one time span and one label set."""

    start_ns: int
    duration_ns: int
    labels: Mapping[str, str]
    samples: list[tuple[tuple[tuple[str, int], ...], int]]   # ((name, kind) root first, value)


def slices_from_profile(profile: Profile, series: str = "comm",
                        extra_labels: Mapping[str, str] | None = None) -> list[Slice]:
    """One Slice per label set found in `profile` (labels: comm, pid and each sample's own, plus
    `extra_labels`); the root frame of each stack is the sample's `series` label."""
    by_labels: dict[tuple, Slice] = {}
    for s in profile.samples:
        labels = _sample_labels(s, extra_labels)
        key = tuple(sorted(labels.items()))
        sl = by_labels.get(key)
        if sl is None:
            sl = by_labels[key] = Slice(profile.start_ns, profile.duration_ns, labels, [])
        root = ((labels.get(series) or s.comm or "?", ROOT),)
        sl.samples.append((root + tuple((f.name, KERNEL if f.is_kernel else USER) for f in reversed(s.stack)),
                           s.value))
    return list(by_labels.values())


def _sample_labels(s: Sample, extra: Mapping[str, str] | None) -> dict[str, str]:
    labels = {"comm": s.comm or "?"}
    if s.pid:
        labels["pid"] = str(s.pid)
    for k, v in s.labels:
        if not k.startswith("__"):
            labels[k] = v
    if extra:
        labels.update({k: v for k, v in extra.items() if not k.startswith("__")})
    return labels


@dataclass
class PageData:
    names: list[str] = field(default_factory=list)
    frames: list[list[int]] = field(default_factory=list)
    stacks: list[list[int]] = field(default_factory=list)
    labels: list[dict[str, str]] = field(default_factory=list)
    slices: list[list] = field(default_factory=list)
    _name_ids: dict[str, int] = field(default_factory=dict)
    _frame_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    _stack_ids: dict[tuple, int] = field(default_factory=dict)
    _label_ids: dict[tuple, int] = field(default_factory=dict)

    def add(self, sl: Slice) -> None:
        key = tuple(sorted(sl.labels.items()))
        label_id = self._label_ids.get(key)
        if label_id is None:
            label_id = self._label_ids[key] = len(self.labels)
            self.labels.append(dict(sl.labels))
        counts: dict[int, int] = {}
        for stack, value in sl.samples:
            sid = self._stack(stack)
            counts[sid] = counts.get(sid, 0) + value
        self.slices.append([sl.start_ns // 1_000_000, max(1, sl.duration_ns // 1_000_000), label_id,
                            [[sid, v] for sid, v in counts.items()]])

    def _stack(self, stack: tuple[tuple[str, int], ...]) -> int:
        sid = self._stack_ids.get(stack)
        if sid is None:
            sid = self._stack_ids[stack] = len(self.stacks)
            self.stacks.append([self._frame(f) for f in stack])
        return sid

    def _frame(self, frame: tuple[str, int]) -> int:
        fid = self._frame_ids.get(frame)
        if fid is None:
            name_id = self._name_ids.get(frame[0])
            if name_id is None:
                name_id = self._name_ids[frame[0]] = len(self.names)
                self.names.append(frame[0])
            fid = self._frame_ids[frame] = len(self.frames)
            self.frames.append([name_id, frame[1]])
        return fid

    def to_json(self) -> str:
        keys: dict[str, set[str]] = {}
        for labels in self.labels:
            for k, v in labels.items():
                keys.setdefault(k, set()).add(v)
        filters = sorted(k for k, values in keys.items() if len(values) <= MAX_LABEL_VALUES)
        doc = {"names": self.names, "frames": self.frames, "stacks": self.stacks, "labels": self.labels,
               "slices": sorted(self.slices, key=lambda s: s[0]), "filters": filters}
        # "</" would end the <script> element the JSON sits in.
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")


def render_page(slices: Iterable[Slice], *, title: str, subtitle: str = "", series: str = "comm",
                unit: str = "samples", frequency_hz: int = 0, nav: str = "") -> str:
    """The page for `slices`. `series` names the label the timeline stacks by; `nav` is trusted
    HTML put in the header (the agent's links and form), empty for a file."""
    from .ui_page import page_template

    data = PageData()
    for sl in slices:
        data.add(sl)
    config = json.dumps({"series": series, "unit": unit, "frequency_hz": frequency_hz}).replace("</", "<\\/")
    values = {"TITLE": html.escape(title), "SUBTITLE": html.escape(subtitle), "NAV": nav, "CONFIG": config,
              "DATA": data.to_json()}
    # One pass, so that a title or a frame name that reads "__DATA__" stays text.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], page_template())


_PLACEHOLDER = re.compile(r"__(TITLE|SUBTITLE|NAV|CONFIG|DATA)__")
