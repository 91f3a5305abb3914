"""CPU workload: a common caller spends 60% / 30% / 10% of its time in a, b, c.

Works on CPython 3.8+. Each unit of work is the same loop, so shares follow the call counts.
Prints "ready" once running; runs until killed (or for argv[1] seconds).
"""
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


def caller():
    a()
    b()
    c()


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
