"""Encoding cost of one collection interval, to OTLP profiles and to pprof.

The interval is Alloy's default: 15 s of 64 CPUs sampled at 19 Hz (18,240 samples) spread over
10,000 distinct stacks of 8-40 frames (kernel frames under a quarter of them) in 60 binaries.
Printed: time per interval as a share of the interval on one core (target < 2%), bytes on the wire
with and without gzip, and the size Go's pprof writes for the same profile (`go tool pprof -proto`,
the peer, run on our output in the same run).

    .venv/bin/python bench/encode.py [--repeat 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import gzip
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from hotstack.profile.model import Frame, FrameKind, Profile, Sample
from hotstack.profile.otlp import encode_profile
from hotstack.profile.pprof import encode_pprof

CPUS, HZ, INTERVAL_S, STACKS = 64, 19, 15, 10_000


def synthetic_interval(seed: int) -> Profile:
    rng = random.Random(seed)
    modules = [(f"/usr/lib/app{m}/libmod{m}.so", f"{rng.getrandbits(160):040x}") for m in range(60)]
    functions = [(f"ns{i % 97}::Class{i % 511}::method_{i}", rng.choice(modules), rng.randrange(0x1000, 0x400000))
                 for i in range(6000)]
    kernel = [f"kernel_fn_{i}" for i in range(400)]
    user_frames = [Frame(name, FrameKind.NATIVE, mod, addr, build_id) for name, (mod, build_id), addr in functions]
    kernel_frames = [Frame(name, FrameKind.KERNEL, "[kernel.kallsyms]", 0xffffffff81000000 + 64 * i)
                     for i, name in enumerate(kernel)]
    roots = user_frames[:50]   # main loops: stacks share their outer frames, as real ones do
    stacks = set()
    while len(stacks) < STACKS:
        depth = rng.randint(8, 40)
        user = tuple(rng.choice(user_frames) for _ in range(depth - 2)) + (rng.choice(roots), roots[0])
        k = tuple(rng.choice(kernel_frames) for _ in range(rng.randint(3, 12))) if rng.random() < 0.25 else ()
        stacks.add(k + user)
    stacks = list(stacks)
    total = CPUS * HZ * INTERVAL_S
    counts = [1] * STACKS
    for _ in range(total - STACKS):   # the rest skewed toward a few hot stacks
        counts[min(int(rng.expovariate(1 / 300)), STACKS - 1)] += 1
    samples = []
    for i, (stack, count) in enumerate(zip(stacks, counts)):
        pid = 1000 + i % 200
        samples.append(Sample(stack, count, pid, pid + i % 4, f"comm{pid % 50}", (("container_id", f"{pid:064x}"),)))
    return Profile(samples, start_ns=time.time_ns(), duration_ns=INTERVAL_S * 10**9, frequency_hz=HZ)


def best_time(fn, repeat: int) -> tuple[float, bytes]:
    times, out = [], b""
    for _ in range(repeat):
        start = time.process_time()   # CPU time of this process: one core's worth
        out = fn()
        times.append(time.process_time() - start)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    profile = synthetic_interval(args.seed)
    n_samples = profile.total
    print(f"interval: {INTERVAL_S} s, {CPUS} CPUs at {HZ} Hz = {n_samples} samples, "
          f"{len(profile.samples)} distinct stacks, best of {args.repeat}")
    rows = []
    for label, fn in [
        ("OTLP v1.10, raw", lambda: encode_profile(profile, "v1.10")),
        ("OTLP v1.10 + gzip (gRPC)", lambda: gzip.compress(encode_profile(profile, "v1.10"), 6)),
        ("OTLP v1.8, raw", lambda: encode_profile(profile, "v1.8")),
        ("pprof, raw", lambda: encode_pprof(profile, compress=False)),
        ("pprof + gzip (Pyroscope)", lambda: encode_pprof(profile, compress=True)),
    ]:
        seconds, data = best_time(fn, args.repeat)
        rows.append((label, seconds, len(data), data))
        share = 100 * seconds / INTERVAL_S
        print(f"  {label:28s} {seconds * 1000:8.1f} ms  {share:5.2f}% of the interval on one core  "
              f"{len(data):>10,d} bytes  {'OK' if share < 2 else 'over the 2% target'}")

    go = shutil.which("go") or "/usr/local/go/bin/go"
    if Path(go).exists():
        with tempfile.TemporaryDirectory() as tmp:
            ours = Path(tmp) / "ours.pb.gz"
            ours.write_bytes(rows[-1][3])
            theirs = Path(tmp) / "go.pb.gz"
            with theirs.open("wb") as f:
                subprocess.run([go, "tool", "pprof", "-proto", str(ours)], stdout=f, check=True,
                               stderr=subprocess.DEVNULL)
            go_size = theirs.stat().st_size
            go_raw = len(gzip.decompress(theirs.read_bytes()))
        print(f"peer: go tool pprof -proto of the same profile: {go_size:,d} bytes gzipped, {go_raw:,d} raw")
        print(f"  size ratio ours/go: gzipped {rows[-1][2] / go_size:.2f}, raw {rows[-2][2] / go_raw:.2f}")
    else:
        print("peer: go not found, no comparison with go tool pprof -proto")
    otlp_gz, pprof_gz = rows[1][2], rows[-1][2]
    print(f"OTLP/pprof size ratio (gzipped): {otlp_gz / pprof_gz:.2f}; "
          f"gzip saves {100 * (1 - otlp_gz / rows[0][2]):.0f}% on OTLP, {100 * (1 - pprof_gz / rows[-2][2]):.0f}% on pprof")


if __name__ == "__main__":
    main()
