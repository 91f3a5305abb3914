"""Class names of Ruby frames, `Class#method` and `Class.method` as Ruby 3.4's backtraces print them.

Read in userspace from what the walker already records: a method or C-function frame's method
entry (ep[-2]) has an owner, the class or module that defines the method. Its permanent name is the
class's `__classpath__` instance variable ("Outer::Inner"); a singleton class (FL_SINGLETON) is named
by the object it is attached to (`__attached__`), when that is a class or module: `Outer.method`.
An anonymous class has no permanent name: the frame keeps its method name alone, as Ruby's does.

Up to 3.1 a class's instance variables are an st_table (RClass.ptr -> rb_classext_t.iv_tbl) of
ID -> VALUE; the IDs are named through the symbol table (symbols.py). The entries array is read
at once and scanned (classes hold a handful of variables). From 3.3 the class's
rb_classext_t holds the name itself (classpath, taken when its permanent_classpath bit is set, as
Ruby's backtraces do) and a singleton class's attached object. 3.2's layout (its variables in
shapes) is not read: its frames keep their method names alone.
"""

from __future__ import annotations

import struct

from ..common.memory import MemoryReadError, Process
from .iseq import T_MASK, T_STRING, is_object, read_string
from .offsets import RubyOffsets
from .symbols import method_name

T_CLASS, T_MODULE = 0x02, 0x03
ST_ENTRIES = 48                     # st_table: ..., entries_start 32, entries_bound 40, entries 48
ST_ENTRY = 24                       # st_table_entry: hash, key, record
ST_DELETED = (1 << 64) - 1          # an entry's hash when it was deleted
MAX_IVARS = 256


class ClassNames:
    """Per process: the class -> permanent name, and ID -> name of the variables met."""

    def __init__(self, offsets: RubyOffsets, symbol_table: int) -> None:
        self.o = offsets
        self.table = symbol_table
        self._ids: dict[int, str | None] = {}
        self._names: dict[int, str | None] = {}

    def _id_name(self, mem: Process, ident: int) -> str | None:
        if ident not in self._ids:
            try:
                self._ids[ident] = method_name(mem, self.o, self.table, self.o.last_op_id, ident)
            except (MemoryReadError, struct.error, IndexError):
                self._ids[ident] = None
        return self._ids[ident]

    def _ivar(self, mem: Process, klass: int, wanted: str) -> int | None:
        ext = mem.u64(klass + self.o.class_ext)
        tbl = mem.u64(ext + self.o.ext_iv_tbl) if ext else 0
        if not tbl:
            return None
        start, bound, entries = struct.unpack("<QQQ", mem.read(tbl + ST_ENTRIES - 16, 24))
        if not entries or not start <= bound or bound - start > MAX_IVARS:
            return None
        raw = mem.read(entries + start * ST_ENTRY, (bound - start) * ST_ENTRY)
        for h, key, value in struct.iter_unpack("<QQQ", raw):
            if h != ST_DELETED and self._id_name(mem, key) == wanted:
                return value
        return None

    def _attached(self, mem: Process, singleton: int) -> int | None:
        if self.o.attached_object:
            return mem.u64(singleton + self.o.attached_object)
        return self._ivar(mem, singleton, "__attached__")

    def _classpath(self, mem: Process, klass: int) -> int | None:
        if self.o.classpath:
            permanent = mem.read(klass + self.o.classpath_flags, 1)[0] & 1
            return mem.u64(klass + self.o.classpath) if permanent else None
        return self._ivar(mem, klass, "__classpath__")

    def _path(self, mem: Process, klass: int) -> str | None:
        path = self._classpath(mem, klass)
        if path is None or not is_object(path) or mem.u64(path) & T_MASK != T_STRING:
            return None
        return read_string(mem, self.o, path) or None

    def prefix(self, mem: Process, owner: int) -> str | None:
        """"Name#" for a class or module, "Name." for the singleton class of one; None: no name."""
        if owner in self._names:
            return self._names[owner]
        name = None
        if (self.o.classpath or self.o.class_ext and self.table) and is_object(owner):
            try:
                flags = mem.u64(owner)
                if flags & T_MASK in (T_CLASS, T_MODULE):
                    if flags & self.o.fl_singleton:
                        attached = self._attached(mem, owner)
                        if (attached is not None and is_object(attached)
                                and mem.u64(attached) & T_MASK in (T_CLASS, T_MODULE)):
                            base = self._path(mem, attached)
                            name = f"{base}." if base else None
                    else:
                        base = self._path(mem, owner)
                        name = f"{base}#" if base else None
            except (MemoryReadError, struct.error):
                name = None
        if len(self._names) > 50_000:
            self._names.clear()
        self._names[owner] = name
        return name
