"""Parse `go tool pprof -raw` output: sample types, period, samples (value, location ids, labels), locations."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class RawProfile:
    period_type: str = ""
    period: int = 0
    sample_types: list[str] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)     # {"values": [...], "locations": [...], "labels": {}}
    locations: dict[int, dict] = field(default_factory=dict)   # id -> {"address", "mapping", "functions"}
    mappings: dict[int, str] = field(default_factory=dict)

    def stack(self, sample: dict) -> list[str]:
        """Function names, leaf first."""
        return [fn for lid in sample["locations"] for fn in self.locations[lid]["functions"]]


def parse_raw(text: str) -> RawProfile:
    p = RawProfile()
    section = ""
    for line in text.splitlines():
        if line.startswith("PeriodType:"):
            p.period_type = line.split(":", 1)[1].strip()
        elif line.startswith("Period:"):
            p.period = int(line.split(":", 1)[1])
        elif line in ("Samples:", "Locations", "Mappings"):
            section = line
        elif section == "Samples:" and not p.sample_types and line.strip():
            p.sample_types = line.split()
        elif section == "Samples:" and re.match(r"^\s+\d", line):
            values, _, locs = line.strip().partition(":")
            p.samples.append({"values": [int(v) for v in values.split()],
                              "locations": [int(x) for x in locs.split()], "labels": {}})
        elif section == "Samples:" and line.strip() and p.samples:
            for key, value in re.findall(r"(\S+):\[([^\]]*)\]", line):
                p.samples[-1]["labels"][key] = value
        elif section == "Locations":
            m = re.match(r"^\s*(\d+): (0x[0-9a-f]+) M=(\d+) (.*)$", line)
            if m:
                lid = int(m.group(1))
                p.locations[lid] = {"address": int(m.group(2), 16), "mapping": int(m.group(3)),
                                    "functions": [m.group(4).split()[0]]}
            elif line.strip() and p.locations:
                # an inlined caller on its own line
                p.locations[max(p.locations)]["functions"].append(line.split()[0])
        elif section == "Mappings":
            m = re.match(r"^(\d+): \S+ (.*)$", line)
            if m:
                p.mappings[int(m.group(1))] = m.group(2)
    return p
