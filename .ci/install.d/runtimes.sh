#!/usr/bin/env bash
# Peers of tests/runtimes: Node.js (the JavaScript-frame tests run a real node, and compare with its own
# `--cpu-prof`). Any node on PATH will do (the distribution's, or NodeSource's); installed only if none.
# A JDK for the HotSpot tests (a running JVM's vmstructs; single-file source launch needs the compiler).
set -euo pipefail
need=()
command -v node >/dev/null || need+=(nodejs)
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
"$(dirname "$0")/../apt-install" "${need[@]}"
