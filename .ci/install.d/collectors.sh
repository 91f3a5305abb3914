#!/usr/bin/env bash
# The OpenTelemetry Collectors of the export tests (issue 3), built with the collector builder from
# the Go module proxy, one per OTLP profiles wire layout we speak (v1.8, v1.9, v1.10), with the OTLP
# receiver, the debug exporter (prints what it decoded) and the OTLP exporter (re-encodes it for a
# test receiver); cached by version under $HOTSTACK_CACHE/otelcol-<version>/otelcol.
# Build time on the 2-core machine: 2-5.5 min per collector with a cold Go build cache (0.165.0, its
# modules already downloaded: ~5.5 min on an earlier machine, 113 s on session 27's), so up to ~15 min
# for all three on a fresh machine, module downloads aside; 0 s once cached (the cache is keyed by
# version and component list). That is the slowest step of a fresh machine's
# set-up, and it needs nothing the package installs bring (Go is the machine's own, >= 1.24): .ci/run
# starts this script first, in the background, beside the other scripts' apt-get installs, and
# install-test-peers runs it last. Each version is built under a lock of its own, so the second run
# waits for the first's build and then finds it cached (or builds it itself if that one failed).
set -euo pipefail
CACHE="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}"
mkdir -p "$CACHE"

# protocol layout -> collector version (the collector compiles in exactly one layout):
#   v1.8 -> v0.139.0 (0.136-0.139), v1.9 -> v0.146.1 (0.140-0.147), v1.10 -> v0.165.0 (>= 0.148).
# Not 0.147.0 for v1.9: `go install .../builder@v0.147.0` needs module zips the proxy refuses (403).
# tests/export/collectors.py holds the same table.
COLLECTOR_VERSIONS="${HOTSTACK_COLLECTOR_VERSIONS:-0.165.0 0.139.0 0.146.1}"
COMPONENTS="otlpreceiver debugexporter otlpexporter envprovider fileprovider"

if ! command -v go >/dev/null; then
    echo "collectors.sh: Go toolchain not found (the collector builder needs Go >= 1.24)" >&2
    exit 1
fi

# One build of a version at a time, on this machine: a second caller waits for the lock, then finds
# the binary cached (or builds it itself if the first build failed).
build_collector() {
    (
        flock 9
        build_collector_unlocked "$1"
    ) 9>"$CACHE/otelcol-$1.lock"
}

build_collector_unlocked() {
    local version="$1"
    local dir="$CACHE/otelcol-$version"
    # The component list is part of the cache key: a binary built with other components is rebuilt.
    if [ -x "$dir/otelcol" ] && [ "$(cat "$dir/components" 2>/dev/null)" = "$COMPONENTS" ]; then
        return 0
    fi
    local work
    work="$(mktemp -d)"
    mkdir -p "$work/gopath"
    cat >"$work/builder.yaml" <<YAML
dist:
  name: otelcol
  description: hotstack test collector (OTLP receiver, debug exporter)
  output_path: $work/out
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v$version
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/debugexporter v$version
  - gomod: go.opentelemetry.io/collector/exporter/otlpexporter v$version
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider v$(provider_version "$version")
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider v$(provider_version "$version")
YAML
    # The module proxy answers some requests of this graph with a passing 403/404: try again.
    local try
    for try in 1 2 3; do
        GOBIN="$work/bin" go install "go.opentelemetry.io/collector/cmd/builder@v$version" && break
        [ "$try" = 3 ] && { rm -rf "$work"; return 1; }
        sleep 5
    done
    # The builder's own build first. Its strict `go mod tidy` stops where the proxy lacks modules
    # that only tests of the collector's packages import (service/telemetry/telemetrytest before
    # 0.148): then let it write the sources only, and resolve with `go mod tidy -e` (those modules
    # are not part of the binary) and compile ourselves.
    if ! "$work/bin/builder" --config "$work/builder.yaml" --ldflags="-s -w" >"$work/build.log" 2>&1; then
        rm -rf "$work/out"
        "$work/bin/builder" --config "$work/builder.yaml" --skip-get-modules --skip-compilation \
            >>"$work/build.log" 2>&1 &&
        (cd "$work/out" && go mod tidy -e >>"$work/build.log" 2>&1 &&
            go build -trimpath -buildvcs=false -ldflags="-s -w" -o otelcol . >>"$work/build.log" 2>&1) || {
            tail -40 "$work/build.log" >&2
            rm -rf "$work"
            return 1
        }
    fi
    # The wire layout comes from pdata's pprofile module: it must be the version asked for.
    if ! go version -m "$work/out/otelcol" | grep -q "go.opentelemetry.io/collector/pdata/pprofile[[:space:]]*v$version"; then
        echo "collectors.sh: collector $version was built with another pdata/pprofile:" >&2
        go version -m "$work/out/otelcol" | grep pprofile >&2
        rm -rf "$work"
        return 1
    fi
    mkdir -p "$dir"
    cp "$work/out/otelcol" "$dir/otelcol.tmp" && mv "$dir/otelcol.tmp" "$dir/otelcol"
    echo "$COMPONENTS" >"$dir/components"
    rm -rf "$work"
}

# confmap providers are versioned on the stable line (v1.x) since the collector's 1.0 split:
# 0.139.0 -> 1.45.0, 0.147.0 -> 1.53.0, 0.165.0 -> 1.71.0 (0.N.0 -> 1.(N-94).0).
provider_version() {
    local minor
    minor="$(echo "$1" | cut -d. -f2)"
    echo "1.$((minor - 94)).0"
}

for v in $COLLECTOR_VERSIONS; do
    echo "   collector $v"
    build_collector "$v"
done
