#!/usr/bin/env bash
# Peers of tests/runtimes: Node.js (the JavaScript-frame tests run a real node, and compare with its own
# `--cpu-prof`). Any node on PATH will do (the distribution's, or NodeSource's); installed only if none.
set -euo pipefail
need=()
command -v node >/dev/null || need+=(nodejs)
"$(dirname "$0")/../apt-install" "${need[@]}"
