"""Kernel symbols from /proc/kallsyms: sorted numpy addresses, names in one bytes blob.

The kernel has ~120k text symbols. As a list of Python strings they cost ~18 MB of the
agent's memory; as one blob with a start and a length per symbol, ~3.5 MB. Names are decoded
only when looked up.

The file is parsed with numpy, a chunk of lines at a time: a Python loop over its ~120k lines
took 0.10-0.15 CPU-s of every start; chunks bound the temporaries (~1.5 MB) where one pass over
the whole 5 MB file would hold several per-byte arrays at once.
"""

from __future__ import annotations

import numpy as np

from ..procs.system import KALLSYMS

_TEXT_TYPES = np.frombuffer(b"tTwW", np.uint8)
_CHUNK = 256 << 10    # bytes read per numpy pass (whole lines): its temporaries are ~6x that
# hex digit -> value; anything else -> 16 (a line that is not "ADDRESS TYPE NAME" is skipped)
_HEX = np.full(256, 16, np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


class KernelSymbols:
    def __init__(self, addresses: np.ndarray, blob: bytes | bytearray, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.addresses = addresses      # uint64, sorted
        self._blob = blob               # names in file order
        self._starts = starts           # uint32: where each sorted symbol's name begins in the blob
        self._lengths = lengths         # uint16: its length (KSYM_NAME_LEN is 512)

    @classmethod
    def load(cls, path: str = KALLSYMS) -> "KernelSymbols":
        addrs: list[np.ndarray] = []
        lengths: list[np.ndarray] = []
        blob = bytearray()      # grows in place, kept as it is: no second copy of ~3 MB of names
        with open(path, "rb") as f:
            rest = b""
            while True:
                chunk = f.read(_CHUNK)
                data = rest + chunk
                if not chunk:
                    if data:
                        data += b"\n"      # a last line without its newline
                    rest = b""
                else:
                    cut = data.rfind(b"\n") + 1
                    data, rest = data[:cut], data[cut:]
                if data:
                    a, n, b = _parse(data)
                    addrs.append(a)
                    lengths.append(n)
                    blob += b
                    del data, a, n, b
                if not chunk:
                    break
        a = np.concatenate(addrs) if addrs else np.zeros(0, np.uint64)
        n = np.concatenate(lengths) if lengths else np.zeros(0, np.uint16)
        starts = np.zeros(len(n), np.uint32)
        np.cumsum(n[:-1], out=starts[1:], dtype=np.uint32)
        # stable: of symbols at one address, lookups name the last in the file, as they always did
        order = np.argsort(a, kind="stable")
        return cls(a[order], blob, starts[order], n[order])

    def __len__(self) -> int:
        return len(self.addresses)

    def name(self, i: int) -> str:
        start = int(self._starts[i])
        return self._blob[start:start + int(self._lengths[i])].decode("utf-8", "replace")

    def lookup(self, address: int) -> str | None:
        return self.lookup_many([address])[0]

    def lookup_many(self, addresses: list[int]) -> list[str | None]:
        if not len(self.addresses) or not addresses:
            return [None] * len(addresses)
        idx = np.searchsorted(self.addresses, np.array(addresses, dtype=np.uint64), side="right") - 1
        return [self.name(i) if i >= 0 else None for i in idx.tolist()]


def _parse(data: bytes) -> tuple[np.ndarray, np.ndarray, bytes]:
    """Whole lines "ffffffff81000000 T _stext" or "ffffffffc0000000 t name\t[module]": the
    addresses (uint64), name lengths (uint16) and names (one blob, file order) of text symbols
    with a non-zero address (zeros: kptr_restrict hides them, nothing to resolve with)."""
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    # 16 hex digits on 64-bit kernels, 8 on 32-bit (names have no spaces: a space at column 16 is
    # a 64-bit address's end)
    long_lines = starts[ends - starts > 16]
    width = 16 if (buf[long_lines + 16] == 32).any() else 8
    # a line too short for "ADDRESS T X" is left out; the gathers below stay inside the chunk
    keep = ends - starts >= width + 3
    starts, ends = starts[keep], ends[keep]
    keep = (buf[starts + width] == 32) & (buf[starts + width + 2] == 32) & np.isin(buf[starts + width + 1], _TEXT_TYPES)
    starts, ends = starts[keep], ends[keep]
    # hex digits -> nibbles (16: not a digit) -> bytes -> one big-endian word per line
    nibbles = _HEX[buf[starts.astype(np.int32)[:, None] + np.arange(width, dtype=np.int32)]]
    keep = ((nibbles.view(np.uint64) & 0xF0F0F0F0F0F0F0F0) == 0).all(axis=1)
    packed = nibbles[:, 0::2] << 4 | nibbles[:, 1::2]
    addresses = packed.view(">u8" if width == 16 else ">u4")[:, 0].astype(np.uint64)
    keep &= addresses != 0
    addresses, starts, ends = addresses[keep], starts[keep], ends[keep]
    # a name ends at the tab before its [module], else at the end of the line
    name_starts = starts + width + 3
    tabs = np.flatnonzero(buf == 9)
    name_ends = ends
    if len(tabs):
        after = np.minimum(np.searchsorted(tabs, name_starts), len(tabs) - 1)
        name_ends = np.where(tabs[after] >= name_starts, np.minimum(tabs[after], ends), ends)
    # the names' bytes, concatenated: the chunk is runs of (other bytes, a name), in order
    bounds = np.empty(2 * len(name_starts) + 2, np.int64)
    bounds[0], bounds[-1] = 0, len(buf)
    bounds[1:-1:2], bounds[2:-1:2] = name_starts, name_ends
    runs = np.zeros(len(bounds) - 1, bool)
    runs[1::2] = True
    inside = np.repeat(runs, np.diff(bounds))
    return addresses, (name_ends - name_starts).astype(np.uint16), buf[inside].tobytes()
