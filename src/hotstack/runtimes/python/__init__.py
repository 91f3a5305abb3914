"""CPython frames: the interpreter's evaluation-loop frames replaced by the Python functions they run.

How it fits together (3.8-3.15, x86-64; not free-threaded builds, said unread):
- detect.py: a process is CPython if a mapped ELF file (libpython3.X.so or the python3.X executable)
  defines `_PyRuntime`; the version comes from `_Py_DebugOffsets` (3.13+), `Py_Version` or the name.
- offsets.py: per-version offsets (table up to 3.12, `_Py_DebugOffsets` from 3.13, its layout per version).
- bpf/python.h: in the sampler, finds the sampled thread's PyThreadState (interp->threads whose
  thread_id is the thread's fsbase; cached per tid) and records its frame chain (code object,
  instruction, marker, checksum) into py_stacks_<buffer>; the sample key carries the stack's hash.
- source.py: CPythonSource, the frame source (runtimes/registry.py): lists Python processes for the
  walker through the RuntimeKernel the engine gives it, reads code objects early (every ~100 ms,
  so short-lived processes keep their names), takes the frames per interval and merges them.
- code.py / linetable.py: code object -> qualified name, file, line (read with process_vm_readv
  through memory.py; cached per (pid, address, checksum); never writes to the target).
- frames.py: the same walk from userspace (tests, and what a frame chain means per version).
- merge.py: each `_PyEval_EvalFrameDefault` native frame is replaced by the Python frames that call
  ran, in order; C-extension and kernel frames stay in place; a chain cut by the walker's depth
  limit ends in `[truncated]`.

Switch: EngineConfig.runtime_frames (default True); `hotstack run profile_cpu --no-python`.
Nothing outside this package knows CPython exists.
"""
