"""The hash behind hotstack's content keys (the kernel BTF's index file, unwind tables, symbol
entries): BLAKE2b, from CPython's own implementation.

`import hashlib` loads OpenSSL's libcrypto whatever is hashed: 3.3 MB of the profiler's resident
memory and 2 ms of every start, for a hash CPython carries itself. On these keys' inputs (symbol
and unwind sections of libpython, libstdc++, a Go collector) BLAKE2b is as fast as OpenSSL's
SHA-256 with the CPU's SHA extensions, or faster: page faults of the mapped file dominate.
"""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:         # an interpreter built without its own BLAKE2 (hashlib then has one)
    from hashlib import blake2b

__all__ = ["blake2b"]
