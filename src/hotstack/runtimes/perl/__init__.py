"""Perl frames: the runloop's native frames replaced by the Perl subs it ran.

How it fits together (Perl 5.36 tested, Debian's threaded build; offsets for 5.30-5.44, x86-64):
- detect.py: a process is Perl if a mapped ELF file named perl* / libperl.so* defines PL_version;
  the thread's interpreter is found through the thread-local PL_current_context (5.36+) or
  PL_curinterp (older: the main thread only). offsets.py: struct offsets per version.
- bpf/perl.h: in the sampler, walks the interpreter's context stack (PL_curstackinfo, si_prev)
  and records (CV, COP, context type) per sub, eval and the main program.
- source.py: PerlSource, the frame source (runtimes/registry.py): names frames `Package::sub`,
  `(eval)`, `<main>` with file and line, read from the target's memory and cached per process;
  each `Perl_runops_standard` native frame is replaced by the frames that runloop call ran
  (frames.py), via python/merge.py.

Switch: `hotstack run profile_cpu --no-perl`; pyroscope.ebpf's `perl_enabled`.
"""
