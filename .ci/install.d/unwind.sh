#!/usr/bin/env bash
# Peers of tests/unwind (issue 6): Debian's python3 (built without frame pointers, the test's
# target), binutils' readelf (the reference CFI interpreter the table test compares against) and
# objcopy (split debug files), a C compiler with pthreads and a Go toolchain for the workloads. linux-perf (bench/unwind.py's ground truth) is installed
# by .ci/run.
#
# With HOTSTACK_BENCH_PEERS=1 it also builds the OpenTelemetry eBPF profiler for bench/unwind.py,
# cached under $HOTSTACK_CACHE/ebpf-profiler-<version>/ebpf-profiler. `go install ...@version` does
# not work for this module (the proxy answers 404 to the @latest lookup that `go install` makes to
# check deprecation), so it is built from a throw-away module that requires it.
set -euo pipefail
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
command -v readelf >/dev/null || need+=(binutils)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v objcopy >/dev/null || need+=(binutils)
# Go for the Go workload (export.sh needs a Go toolchain too; Debian's is enough here).
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need+=(golang-go)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi

if [ "${HOTSTACK_BENCH_PEERS:-0}" = "1" ]; then
    version="${HOTSTACK_OTEL_PROFILER_VERSION:-v0.0.202633}"
    out="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}/ebpf-profiler-$version"
    if [ ! -x "$out/ebpf-profiler" ]; then
        work="$(mktemp -d)"
        trap 'rm -rf "$work"' EXIT
        mkdir -p "$out"
        printf 'module benchpeer\n\ngo 1.25.0\n\nrequire go.opentelemetry.io/ebpf-profiler %s\n' "$version" > "$work/go.mod"
        printf '//go:build tools\n\npackage tools\n\nimport _ "go.opentelemetry.io/ebpf-profiler"\n' > "$work/tools.go"
        (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -o "$out/ebpf-profiler" go.opentelemetry.io/ebpf-profiler)
    fi
fi
