#!/usr/bin/env bash
# The build tools and kernel-side peers that every area's tests use: clang/llvm (make bpf and the
# generated-objects check), perf (ground truth), bpftool, capsh (privilege tests), gcc/g++ (workloads),
# ip (iproute2: the agent server test reaches it from a network namespace of its own).
# Only what is missing is installed, so a machine that has everything asks no registry.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
for pair in clang:clang llvm-objcopy:llvm gcc:gcc g++:g++ make:make readelf:binutils capsh:libcap2-bin \
            unshare:util-linux perf:linux-perf bpftool:bpftool ip:iproute2; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[ -e /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -e /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
    echo "00-base.sh: installing ${need[*]}"
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi
