#!/usr/bin/env bash
# Test peers of the export area (issue 3): Debian's Chromium for the flame graph page test, openssl
# for the TLS test; `go tool pprof` comes with the Go toolchain. The OpenTelemetry Collectors the
# export tests run are built by collectors.sh (the slowest step of a fresh machine's set-up:
# install-test-peers runs it last, and .ci/run starts it first, beside the package installs).
set -euo pipefail

if ! command -v chromium >/dev/null || ! command -v openssl >/dev/null; then
    # chromium: the flame graph page test; openssl: a self-signed certificate for the TLS test.
    "$(dirname "$0")/../apt-install" chromium fonts-dejavu-core openssl
fi
