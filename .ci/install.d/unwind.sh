#!/usr/bin/env bash
# Peers of tests/unwind (issue 6): Debian's python3 (built without frame pointers, the test's
# target), binutils' readelf (the reference CFI interpreter the table test compares against) and
# objcopy (split debug files), a C compiler with pthreads, musl-gcc and a Go toolchain for the workloads; linux-perf
# (the ground truth of tests/unwind/test_kernel_unwind.py) comes with 00-base.sh. The OpenTelemetry eBPF
# profiler, a bench peer only, is built by bench/otel_profiler.py itself.
set -euo pipefail
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
command -v readelf >/dev/null || need+=(binutils)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v objcopy >/dev/null || need+=(binutils)
# musl-gcc for tests/unwind/test_musl.py: programs on musl libc (Alpine's C library), dynamic and static
command -v musl-gcc >/dev/null || need+=(musl-tools musl-dev)
# Go for the Go workload (export.sh needs a Go toolchain too; Debian's is enough here).
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || need+=(golang-go)
if [ ${#need[@]} -gt 0 ]; then
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi
