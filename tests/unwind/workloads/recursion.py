"""A Python recursion that never ends: deep Python stacks over sorted() and a lambda (C calls)."""
import sys

sys.setrecursionlimit(10000)


def rec(n):
    return sorted(range(200), key=lambda x: -x)[0] if n == 0 else rec(n - 1) + 1


while True:
    rec(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
