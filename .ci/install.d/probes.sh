#!/usr/bin/env bash
# tests/probes: uprobes on the C library, off-CPU via the sched_switch BTF tracepoint, OBI's pinned map.
# They need only what .ci/run installs (gcc for the workloads, clang/llvm for the BPF objects), a
# kernel with BTF (/sys/kernel/btf/vmlinux) and uprobes, and a bpffs the tests mount themselves.
set -euo pipefail
for path in /sys/kernel/btf/vmlinux /sys/bus/event_source/devices/uprobe/type; do
    [ -e "$path" ] || echo "probes.sh: warning: $path is missing: tests/probes will fail on this kernel" >&2
done
command -v cc >/dev/null || { echo "probes.sh: cc is missing" >&2; exit 1; }
