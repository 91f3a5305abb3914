"""Demangling of C++ (Itanium) and Rust (legacy and v0) symbol names.

Modes are Alloy's `demangle` argument:
  none        the symbol as stored in the file
  simplified  qualified name only: no parameters, no template arguments, no return type
  templates   qualified name with template arguments, no parameters
  full        everything the demangler gives, without the `[clone .cold]` suffixes

C++ goes through `__cxa_demangle` of the libstdc++ that every C++ host has (ctypes, no
extra package; the notes measured it at ~6 us a name, the same as `cxxfilt` which
wraps the same call). Rust goes through `rust-demangler` (pure Python, legacy and v0).
Results are cached (LRU): a profile shows the same few thousand names again and again.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections import OrderedDict

MODES = ("none", "simplified", "templates", "full")
MAX_NAME = 4096          # longer names are shown as stored: demanglers recurse on hostile input

_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_CLONE = re.compile(r"( \[clone [^\]]*\])+$")
_RUST_LEGACY = re.compile(r"^_ZN.*17h[0-9a-f]{16}E(\.\S*)?$")


def check_mode(mode: str) -> str:
    from ..errors import ConfigError

    if mode not in MODES:
        raise ConfigError(f"demangle {mode!r}: expected one of {', '.join(MODES)}")
    return mode


class _CxaDemangler:
    """abi::__cxa_demangle through ctypes; None when libstdc++ is not there."""

    def __init__(self) -> None:
        self._fn = None
        self._free = None
        try:
            lib = ctypes.CDLL("libstdc++.so.6")
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            return
        fn = getattr(lib, "__cxa_demangle")  # getattr: a class body would mangle the dunder name
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        self._free = getattr(libc, "free")
        self._free.argtypes = [ctypes.c_void_p]
        self._fn = fn

    def __call__(self, name: str) -> str | None:
        if self._fn is None:
            return None
        status = ctypes.c_int(0)
        ptr = self._fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
        if not ptr:
            return None
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace") if status.value == 0 else None
        finally:
            self._free(ptr)


_cxa = _CxaDemangler()


def _rust(name: str) -> str | None:
    try:
        import rust_demangler
        import rust_demangler.rust_v0 as v0
    except ImportError:
        return None
    # rust-demangler 1.0 print()s the partial result of a name it cannot read, which would land
    # in our output (folded, json): a module global named `print` shadows the builtin for it alone.
    v0.print = _quiet
    try:
        out = rust_demangler.demangle(name)
    except Exception:    # the package raises its own exception types on names it cannot read
        return None
    return _RUST_HASH.sub("", out) if out and out != name else None


def _quiet(*_args, **_kw) -> None:
    pass


def demangle_full(name: str) -> str | None:
    """The full demangled form, or None when the name is not mangled (or not readable)."""
    if len(name) > MAX_NAME:
        return None
    if name.startswith("_R"):
        return _rust(name)
    if name.startswith("_ZN") and _RUST_LEGACY.match(name):
        out = _rust(name)
        if out is not None:
            return out
    if name.startswith("_Z"):
        out = _cxa(name)
        if out is not None and name.startswith("_ZN") and _RUST_HASH.search(out):
            out = _RUST_HASH.sub("", out)   # a Rust legacy name that rust-demangler refused
        return out
    return None


def _strip_brackets(text: str, open_: str, close: str) -> str:
    """Remove every bracketed group `open_ ... close` (nested), except in `operator<` names."""
    out = []
    depth = 0
    i = 0
    while i < len(text):
        if text.startswith("operator", i) and depth == 0:
            # keep operator<, operator<<, operator(), operator< <...> as written
            m = re.match(r"operator(\(\)|<<=|>>=|<=>|<<|>>|<=|>=|->\*|->|\[\]|[<>+\-*/%^&|~!=,]=?|\s*\w[\w:\s*&]*)",
                         text[i:])
            if m:
                out.append(m.group(0))
                i += len(m.group(0))
                continue
        c = text[i]
        if c == open_:
            depth += 1
        elif c == close and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
        i += 1
    return "".join(out)


def _drop_params(full: str) -> str:
    """`ret ns::f<T>(int) const` -> `ns::f<T>`: parameters, qualifiers and return type removed."""
    text = _CLONE.sub("", full)
    # The parameter list is the last top-level (...) group; everything after it is qualifiers.
    depth_angle = 0
    depth_paren = 0
    last_open = -1
    i = 0
    while i < len(text):
        if text.startswith("operator", i):
            m = re.match(r"operator(\(\)|<<=|>>=|<=>|<<|>>|<=|>=|->\*|->|\[\]|[<>]=?)", text[i:])
            if m:
                i += len(m.group(0))
                continue
        c = text[i]
        if c == "<":
            depth_angle += 1
        elif c == ">" and depth_angle:
            depth_angle -= 1
        elif c == "(":
            if depth_angle == 0 and depth_paren == 0:
                last_open = i
            depth_paren += 1
        elif c == ")" and depth_paren:
            depth_paren -= 1
        i += 1
    if last_open > 0 and not text.startswith("(anonymous", last_open) and not text.endswith("}"):
        text = text[:last_open]
    # A return type (template functions) is separated from the name by a top-level space.
    depth = 0
    cut = -1
    for j, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)" and depth:
            depth -= 1
        elif c == " " and depth == 0 and not text[:j].endswith("operator") and not text[:j].endswith(","):
            cut = j
    if cut >= 0 and not text[cut + 1:].startswith("["):
        text = text[cut + 1:]
    return text.strip()


def _unqualify(text: str) -> str:
    """Rust's qualified paths: `<a::Type<T>>::f` and `<a::Type as b::Trait>::f` -> `a::Type<T>::f`."""
    if not text.startswith("<"):
        return text
    depth = 0
    for j, c in enumerate(text):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                inner, rest = text[1:j], text[j + 1:]
                as_at, d = -1, 0
                for k, ch in enumerate(inner):
                    if ch == "<":
                        d += 1
                    elif ch == ">":
                        d -= 1
                    elif d == 0 and inner.startswith(" as ", k):
                        as_at = k
                        break
                return (inner[:as_at] if as_at >= 0 else inner) + rest
    return text


class Demangler:
    """Names as the chosen mode shows them, cached (bounded)."""

    def __init__(self, mode: str = "full", cache_size: int = 65536) -> None:
        self.mode = check_mode(mode)
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def __call__(self, name: str) -> str:
        if self.mode == "none" or not (name.startswith("_Z") or name.startswith("_R")):
            return name
        with self._lock:
            hit = self._cache.get(name)
            if hit is not None:
                self._cache.move_to_end(name)
                return hit
        out = self._demangle(name)
        with self._lock:
            self._cache[name] = out
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    def _demangle(self, name: str) -> str:
        # Suffixes such as `.cold` or `.constprop.0` are not part of the mangling.
        full = demangle_full(name)
        if full is None and "." in name:
            full = demangle_full(name.split(".", 1)[0])
        if full is None:
            return name
        if self.mode == "full":
            return _CLONE.sub("", full)
        no_params = _drop_params(full)
        if self.mode == "templates":
            return no_params
        # Rust generic paths (`foo::<T>`) leave a dangling `::` once the arguments are gone.
        return _strip_brackets(_unqualify(no_params), "<", ">").replace("::::", "::").rstrip(":") or no_params
