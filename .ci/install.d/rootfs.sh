#!/usr/bin/env bash
# Debian root filesystems with the distribution's own language runtimes, for tests/runtimes/test_chroot.py
# (each runtime run in a plain chroot: its maps show paths from the host's root). Built with mmdebstrap
# from Debian's package registry into $HOTSTACK_CACHE/rootfs/, one tar per suite, keyed by the suite and
# its package list (a changed list builds a new tar); ~4 min on a fresh 2-core machine, then cached.
set -euo pipefail
"$(dirname "$0")/../apt-install" mmdebstrap
dir="$HOTSTACK_CACHE/rootfs"
mkdir -p "$dir"
build() {      # suite packages...
    local suite=$1; shift
    local list; list=$(IFS=,; echo "$*")
    local key; key=$(printf '%s' "$list" | sha256sum | cut -c1-12)
    local tar="$dir/$suite-$key.tar"
    if [ ! -s "$tar" ]; then
        echo "rootfs.sh: mmdebstrap $suite ($list)"
        mmdebstrap --quiet --variant=apt --format=tar --include="$list" "$suite" "$tar.tmp"
        mv "$tar.tmp" "$tar"
    fi
    ln -sfn "$(basename "$tar")" "$dir/$suite.tar"     # what the tests open
}
# Debian 13: CPython 3.13, Node.js 20 (a libnode build), Ruby 3.3 (a stripped libruby), PHP 8.4, Perl 5.40
build trixie python3 nodejs ruby php-cli perl
