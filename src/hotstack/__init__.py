"""hotstack: a continuous CPU profiler for Linux with eBPF sampling and Python userspace."""

__version__ = "0.1.0"
