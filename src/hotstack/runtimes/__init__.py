"""Language runtimes: each one's frames in place of its interpreter's or JIT's native frames.

One package a runtime (python, v8 (Node.js), ruby, php, perl, hotspot (Java)), each a frame
source behind one interface (registry.py: FrameSource, its lifecycle, and the kernel half it is
handed, RuntimeKernel), listed in registry.FRAME_SOURCES. What the runtimes share is in common/:
remote memory reads (memory.py), merging runtime frames into native stacks (merge.py), the files
a runtime lives in, opened through the process's own mapping, and the runtimes recognized and not
read (files.py), the retry ladder (retries.py), the interpreters' lifecycle (interpreter_source.py)
and anonymous JIT code (jit.py). A runtime imports common/ and nothing of another runtime;
registry.py imports each runtime only when a process names it.

Native unwinding (tables, the kernel unwinder's maps) is unwind/, below this package; the kernel
halves are bpf/<runtime>.h with their records in bpf/schema.yaml.
"""
