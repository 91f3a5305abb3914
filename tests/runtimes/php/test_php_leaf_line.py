"""The line of the innermost PHP frame while the VM runs a tight loop with opcache on (its
optimizer's opcodes neither call nor may throw there): the frame's stored opline is an earlier one,
the current one is in the VM's register (bpf/php.h). Against the distribution's php-cli with
opcache enabled for the CLI and its JIT off, as Debian's php-fpm runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hotstack.profile.model import FrameKind
from tests.runtime_fixtures import runtime_source
from tests.runtimes.frames_harness import PHP, collect_until, engine

from source_lines import function_lines

pytestmark = pytest.mark.root

SCRIPT = Path(__file__).resolve().parent / "tight_loop.php"
OPCACHE = ("-d", "opcache.enable_cli=1", "-d", "opcache.jit=off", "-d", "opcache.jit_buffer_size=0")


def loop_lines() -> set[int]:
    """The lines of spin()'s for loop: its head, its body and its closing brace."""
    source = SCRIPT.read_text().splitlines()
    spin = function_lines(SCRIPT, "spin")
    head = next(n for n in spin if source[n - 1].lstrip().startswith("for ("))
    closing = next(n for n in spin if n > head and source[n - 1].strip() == "}")
    return set(range(head, closing + 1))


def spin_lines(samples) -> Counter:
    """The line of spin(), the innermost PHP frame, per sample that has it innermost."""
    lines = Counter()
    for s in samples:
        php = [f for f in s.stack if f.kind is FrameKind.PHP]
        if php and php[0].name == "spin":
            assert Path(php[0].file) == SCRIPT, php[0]
            lines[php[0].line] += s.value
    return lines


def test_innermost_frame_line_in_a_tight_loop_with_opcache():
    with PHP.running("60", *OPCACHE, script=SCRIPT) as proc, engine(pids=(proc.pid,)) as prof:
        samples = collect_until(prof, lambda got: sum(spin_lines(got).values()) >= 600, 12)
        stats = runtime_source(prof, "php").stats()
    lines = spin_lines(samples)
    total = sum(lines.values())
    assert total >= 300, f"only {total} samples in spin()"
    in_loop = sum(n for line, n in lines.items() if line in loop_lines())
    assert in_loop >= 0.9 * total, f"{in_loop} of {total} samples on a line of the loop: {lines.most_common(5)}"
    assert stats["register_oplines"] > 0, stats
