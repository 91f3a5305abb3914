"""Ruby frames: the VM's native frames replaced by the Ruby methods, blocks and C functions they ran.

How it fits together (Ruby 3.1 tested; offsets for 2.7-3.4, x86-64):
- detect.py: a process is Ruby if a mapped ELF file (libruby-X.Y.so or a static ruby) defines
  `ruby_version`; how a thread finds its execution context comes from its TLS relocations.
- offsets.py: per-version struct offsets.
- bpf/ruby.h: in the sampler, finds the sampled thread's execution context (ruby_current_ec
  through the thread's DTV) and records its control frames (iseq, pc, method entry, flags) into
  rb_stacks_<buffer>; the sample key carries the stack's hash.
- source.py: RubySource, the frame source (runtimes/registry.py).
- iseq.py: iseq -> label, file, line (cached per process, checked against the sampled pc);
  symbols.py: C-function frames' method names from Ruby's symbol table;
  classes.py: the class of method and C-function frames (`Class#method`, `Class.method`) from
  the recorded method entry's owner.
- jit.py: stacks through JIT code (YJIT; PHP's opcache JIT too): native frames cut at it, one
  `[ruby jit]` / `[php jit]` frame below the interpreter's.
- frames.py: frame kinds and the split into VM entries; each `rb_vm_exec` native frame is
  replaced by its entry's frames (python/merge.py, shared with CPython).

Switch: `hotstack run profile_cpu --no-ruby`; pyroscope.ebpf's `ruby_enabled`.
"""
