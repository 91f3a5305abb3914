"""Benchmark: Ruby, PHP and Perl frames of hotstack against native-only sampling of the same process.

    sudo .venv/bin/python bench/interpreters.py [--seconds 8] [--rate 99]
    sudo .venv/bin/python bench/interpreters.py --processes 10 --rate 19 --seconds 20   # the agent's rate
    sudo .venv/bin/python bench/interpreters.py --only perl     # one language

The workloads are the tests' (tests/runtimes/ruby/workload.rb, tests/runtimes/php/workload.php,
tests/runtimes/perl/workload.pl: two hot methods 75/25). Per language, two phases of the same length: hotstack with the language's frames, and
with them off (`--no-ruby` / `--no-php` / `--no-perl`: the same kernel unwinder, no interpreter walk). Per phase: BPF
time per sample (run_time_ns of every program hotstack holds, kernel.bpf_stats_enabled on for the run,
divided by the workload's samples) and hotstack's own CPU (% of a core). With --processes N: N
workloads of each language at once, the whole host sampled, hotstack's CPU only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from hotstack.ebpf import enable_run_time_stats  # noqa: E402
from hotstack.profile.model import FrameKind  # noqa: E402
from hotstack.sampling import Engine, EngineConfig  # noqa: E402
from node import bpf_run_time_ns  # noqa: E402

LANGS = {  # name: (argv, frame source, frame kind)
    "ruby": (["ruby", str(ROOT / "tests/runtimes/ruby/workload.rb")], "ruby", FrameKind.RUBY),
    "php": (["php", str(ROOT / "tests/runtimes/php/workload.php")], "php", FrameKind.PHP),
    "perl": (["perl", str(ROOT / "tests/runtimes/perl/workload.pl")], "perl", FrameKind.PERL),
}


def start(argv: list[str], seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([*argv, str(seconds)], stdout=subprocess.PIPE, text=True)
    json.loads(proc.stdout.readline())
    return proc


def run_one(lang: str, seconds: float, rate: int, frames: bool) -> dict:
    argv, source, kind = LANGS[lang]
    proc = start(argv, seconds + 2)
    try:
        config = EngineConfig(frequency=rate, pids=(proc.pid,), runtimes_off=() if frames else (source,))
        with Engine(config) as engine:
            bpf0, cpu0 = bpf_run_time_ns(os.getpid()), time.process_time()
            profile = engine.run(seconds)
            bpf1, cpu1 = bpf_run_time_ns(os.getpid()), time.process_time()
    finally:
        proc.kill()
        proc.wait()
    samples = sum(s.value for s in profile.samples)
    mine = sum(s.value for s in profile.samples if any(f.kind is kind for f in s.stack))
    return {"samples": samples, "share": 100.0 * mine / max(samples, 1),
            "bpf_us_per_sample": (bpf1 - bpf0) / 1e3 / max(samples, 1),
            "cpu_percent": 100.0 * (cpu1 - cpu0) / seconds}


def run_many(langs: list[str], count: int, seconds: float, rate: int) -> dict:
    procs = [start(LANGS[lang][0], seconds + 10) for lang in langs for _ in range(count)]
    kinds = {LANGS[lang][2] for lang in langs}
    try:
        with Engine(EngineConfig(frequency=rate)) as engine:
            cpu0 = time.process_time()
            samples = framed = 0
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(min(5.0, max(0.0, end - time.monotonic())))
                for s in engine.collect()[0].samples:
                    if any(f.kind in kinds for f in s.stack):
                        framed += s.value
                    samples += s.value
            cpu = time.process_time() - cpu0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"cpu_percent": 100.0 * cpu / seconds, "samples": samples, "framed": framed}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rate", type=int, default=99)
    ap.add_argument("--processes", type=int, default=0)
    ap.add_argument("--only", action="append", choices=list(LANGS), help="these languages (repeatable; default all)")
    args = ap.parse_args()
    langs = args.only or list(LANGS)
    if args.processes:
        r = run_many(langs, args.processes, args.seconds, args.rate)
        print(" + ".join(f"{args.processes} {lang}" for lang in langs) + f" processes, {args.rate} Hz, whole host: "
              f"hotstack CPU {r['cpu_percent']:.2f}% of a core, {r['samples']} samples ({r['framed']} with "
              f"{'/'.join(langs)} frames)")
        return
    stats_fd = enable_run_time_stats()
    try:
        for lang in langs:
            for frames in (True, False):
                r = run_one(lang, args.seconds, args.rate, frames)
                print(f"{lang}, {'frames' if frames else '--no-' + lang}: {r['samples']} samples "
                      f"({r['share']:.0f}% with {lang} frames), BPF {r['bpf_us_per_sample']:.1f} us/sample, "
                      f"hotstack CPU {r['cpu_percent']:.2f}% of a core")
    finally:
        os.close(stats_fd)


if __name__ == "__main__":
    main()
