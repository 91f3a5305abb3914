#!/usr/bin/env bash
# Peers of tests/symbols: compilers and runtimes whose binaries the tests build and profile
# (C/C++, Rust, Go, Node, Java) and the binutils that split debug files. Each is installed only
# when missing, from Debian's packages. Python 3.12+ for `-X perf` has no Debian 12 package:
# that one test skips where no such interpreter exists.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

need=()
command -v gcc >/dev/null || need+=(gcc)
command -v g++ >/dev/null || need+=(g++)
command -v objcopy >/dev/null || need+=(binutils)
command -v rustc >/dev/null || need+=(rustc)
command -v go >/dev/null || need+=(golang-go)
command -v node >/dev/null || need+=(nodejs)
{ command -v javac && command -v jcmd; } >/dev/null || need+=(default-jdk-headless)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi
