"""Unwind-table build time: today's builder (cfi.py + table.py) against the vectorized one.

Both builders run on the same files, the same number of times, alternately; every run is
printed (process CPU time, so that other load on the machine counts less), then the best and
the median of each and the speed-up. The vectorized builder's rows are checked equal to the
old builder's before timing (same pcs, same rules).

Run: .venv/bin/python bench/unwind_tables.py [--runs 7] [FILE ...]
Default files: Debian's libc and libpython (whatever `ldd` finds for python3), plus
libstdc++ and ld.so when present.
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time

import numpy as np

from hotstack.symbols.elf import ElfFile
from hotstack.unwind.builder import build_table_fast
from hotstack.unwind.kernel_tables import build_file_table
from hotstack.unwind.table import build_table


def default_files() -> list[str]:
    found = []
    for pattern in ("/usr/lib/*-linux-gnu/libc.so.6", "/usr/lib/*-linux-gnu/libpython3*.so.1.0",
                    "/usr/lib/*-linux-gnu/libstdc++.so.6", "/usr/lib/*-linux-gnu/ld-linux*.so.2"):
        found.extend(sorted(glob.glob(pattern))[:1])
    return found


def expanded(table) -> tuple[np.ndarray, np.ndarray]:
    rules = np.array([(r.kind, r.cfa_offset, r.rbp_offset, r.ra_offset) for r in table.rules],
                     np.int64).reshape(-1, 4)
    return table.pcs, rules[table.rule_ids.astype(np.int64)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    files = args.files or default_files()
    print(f"{'file':<48} {'run':>3} {'old ms':>9} {'new ms':>9} {'kernel ms':>10}")
    summary = []
    for path in files:
        elf = ElfFile(path)
        old_pcs, old_rules = expanded(build_table(elf))
        new_pcs, new_rules = expanded(build_table_fast(elf))
        same = len(old_pcs) == len(new_pcs) and bool((old_pcs == new_pcs).all() and (old_rules == new_rules).all())
        old_t, new_t, kern_t = [], [], []
        for run in range(args.runs):
            t0 = time.process_time()
            build_table(elf)
            t1 = time.process_time()
            build_table_fast(elf)
            t2 = time.process_time()
            build_file_table(elf)
            t3 = time.process_time()
            old_t.append(t1 - t0)
            new_t.append(t2 - t1)
            kern_t.append(t3 - t2)
            print(f"{path:<48} {run:>3} {1e3 * old_t[-1]:>9.1f} {1e3 * new_t[-1]:>9.1f} {1e3 * kern_t[-1]:>10.1f}")
        summary.append((path, len(old_pcs), same, old_t, new_t, kern_t))
        elf.close()
    print()
    print(f"{'file':<48} {'rows':>7} {'same':>5} {'old best/med':>14} {'new best/med':>14} {'speed-up best/med':>18}"
          f" {'kernel table med':>17}")
    for path, rows, same, old_t, new_t, kern_t in summary:
        ob, om, nb, nm = min(old_t), statistics.median(old_t), min(new_t), statistics.median(new_t)
        print(f"{path:<48} {rows:>7} {str(same):>5} {1e3 * ob:>6.1f}/{1e3 * om:<6.1f} ms {1e3 * nb:>6.1f}/{1e3 * nm:<6.1f} ms"
              f" {ob / nb:>8.1f}x/{om / nm:<6.1f}x {1e3 * statistics.median(kern_t):>12.1f} ms")
    return 0 if all(s[2] for s in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
