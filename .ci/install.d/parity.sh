#!/usr/bin/env bash
# Peers of tests/containers (tests/docker_engine.py, tests/containerd_cri.py): a real Docker Engine
# and containerd with its CRI plugin, from Debian's docker.io (it brings containerd, ctr and runc).
# The tests start their own daemons with their state under a temporary directory and no networks;
# nothing is started here. Only what is missing is installed.
set -euo pipefail
need=()
for pair in dockerd:docker.io docker:docker.io containerd:containerd ctr:containerd runc:runc; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "parity.sh: installing ${need[*]}"
    "$(dirname "$0")/../apt-install" $(printf '%s\n' "${need[@]}" | sort -u)
fi
