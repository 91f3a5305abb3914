"""Hand-written routines of a C library recognised by their machine code, where no symbol names
them: musl's `__restore_rt` and `__clone` are hidden (absent from a stripped libc's .dynsym) and
follow exported assembly symbols of size 0, whose names would otherwise stretch over them. The
unwinder finds the same code (unwind/code_rows.py: a signal frame, a thread's root)."""

from __future__ import annotations

# mov rax, 15 (rt_sigreturn); syscall: the signal return trampoline (glibc's and musl's)
SIGRETURN = bytes.fromhex("48c7c00f0000000f05")
# musl's x86-64 __clone, in the child: call *%r9 (the thread's start); mov %eax,%edi;
# xor %eax,%eax; mov $60,%al (exit); syscall; hlt
CLONE_CHILD = bytes.fromhex("41ffd189c731c0b03c0f05f4")
# (pattern, name): each symbol covers its pattern; the trampoline's starts at the nop before it,
# where a return address into it is looked up (its address - 1)
KNOWN_CODE = ((b"\x90" + SIGRETURN, "__restore_rt"), (CLONE_CHILD, "__clone"))
