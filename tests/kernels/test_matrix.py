"""The kernel matrix's verdict and table (the VM runs themselves: `make test-kernels`)."""

from __future__ import annotations

import json
from pathlib import Path

from .matrix import ITEMS, regressions, table

EXPECTED = json.loads((Path(__file__).parent / "expected.json").read_text())


def _results(**statuses: str) -> dict:
    return {"items": {item: {"status": status, "detail": f"why {item}", "seconds": 1.0}
                      for item, status in statuses.items()}}


def test_a_kernel_that_passed_before_and_fails_now_is_a_regression():
    everything = {item: "pass" for item in EXPECTED["5.10"]}
    assert regressions("5.10 (5.10.0-46-amd64)", _results(**everything), EXPECTED) == []
    broken = dict(everything, python="off")
    assert regressions("5.10 (5.10.0-46-amd64)", _results(**broken), EXPECTED) == ["python"]
    # no results at all: every item expected to pass (not those the kernel cannot run: "off")
    assert regressions("5.10 (5.10.0-46-amd64)", None, EXPECTED) == [
        item for item, status in EXPECTED["5.10"].items() if status == "pass"]
    assert "remap" in EXPECTED["5.10"] and "remap" not in regressions("5.10 (x)", None, EXPECTED)
    # items left out with --only are not held against the kernel
    assert regressions("5.10 (x)", _results(doctor="pass"), EXPECTED, only=["doctor"]) == []


def test_off_on_the_host_is_not_a_regression():
    host = {item: "pass" for item in EXPECTED["host"]}
    assert regressions("host 6.18", _results(**host, kprobes="off", fentry="off"), EXPECTED) == []


def test_table_has_a_row_per_kernel_and_says_why():
    rows = [("5.10 (v)", _results(**{item: "pass" for item in ITEMS}, ), 60.0),
            ("6.1 (v)", _results(doctor="pass", kprobes="off", python="fail"), 90.0)]
    text = table(rows).splitlines()
    assert len(text) == 4 and all(line.count("|") == len(ITEMS) + 4 for line in text)
    assert "| 5.10 (v) | 1.0 min | pass |" in text[2]
    assert "off: why kprobes" in text[3] and "FAIL: why python" in text[3] and "not run" in text[3]
