"""CPU workload: a common caller spends 60% / 30% / 10% of its time in a, b, c.

Works on CPython 3.8+. Each unit of work is the same loop, so shares follow the call counts.
The order of the three calls is drawn at random on each round: a strictly periodic cycle of about
half a millisecond, sampled by a strictly periodic timer whose handler perturbs the target, was
seen to lock in phase (Debian's python3.11: a measured 64-70% against 61% by the program's own clock
and by py-spy), and that is a property of the pair, not of the stacks.
Prints "ready" once running; runs until killed (or for argv[1] seconds).
"""
import random
import sys
import time


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def a():
    return spin(6000)


def b():
    return spin(3000)


def c():
    return spin(1000)


ORDERS = ((a, b, c), (a, c, b), (b, a, c), (b, c, a), (c, a, b), (c, b, a))


def caller():
    for call in random.choice(ORDERS):
        call()


def main():
    deadline = time.time() + (float(sys.argv[1]) if len(sys.argv) > 1 else 3600)
    print("ready", flush=True)
    calls = 0
    while time.time() < deadline:
        caller()
        calls += 1
    print(f"calls {calls} cpu {time.process_time()}", flush=True)     # throughput and CPU, for bench/python.py


if __name__ == "__main__":
    main()
