"""PHP frames: the Zend VM's native frames replaced by the PHP functions they ran.

How it fits together (PHP 8.2 tested, NTS builds: php-cli, php-fpm; offsets for 7.4-8.5, x86-64):
- detect.py: a process is PHP if a mapped ELF file named like php8.2 / php-fpm8.2 / libphp8.2.so
  defines `executor_globals`; the version comes from its name.
- bpf/php.h: in the sampler, follows executor_globals.current_execute_data through
  prev_execute_data and records (function, opline, call flags) per frame.
- source.py: PhpSource, the frame source (runtimes/registry.py): names frames `Class::method`,
  `function` or `{main}` with file and line (the opline's), read from the target's memory and
  cached per process; each `execute_ex` native frame is replaced by the frames that call of the
  VM ran (a frame flagged ZEND_CALL_TOP is where C code entered it), via python/merge.py.

Switch: `hotstack run profile_cpu --no-php`; pyroscope.ebpf's `php_enabled`.
"""
