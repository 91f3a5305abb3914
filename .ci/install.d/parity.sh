#!/usr/bin/env bash
# Peers of tests/containers (and of the tests that use tests/docker_engine.py): a real Docker
# Engine, Debian's docker.io (it brings containerd and runc). The tests start their own dockerd
# with its data under a temporary directory and no networks; nothing is started here.
set -euo pipefail
command -v dockerd >/dev/null || apt-get install -y -qq --no-install-recommends docker.io >/dev/null
command -v docker >/dev/null || { echo "parity.sh: docker.io installed no docker CLI" >&2; exit 1; }
