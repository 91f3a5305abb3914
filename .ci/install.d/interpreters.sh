#!/usr/bin/env bash
# Peers of tests/runtimes/ruby, php and perl: the distribution's interpreters (for PHP also php-fpm,
# whose pool the FPM test starts itself: the package's own service is never started); for Perl, Devel::NYTProf
# (libdevel-nytprof-perl, the independent profiler the Perl share test compares with) and libperl's
# headers with a C compiler (the offset-table test compiles against them); and (only with
# HOTSTACK_BENCH_PEERS=1) rbspy, the independent Ruby profiler the share test also compares with when
# it is there (built from crates.io with cargo, cached under $HOTSTACK_CACHE/rbspy keyed by version;
# the build takes over an hour on a 2-CPU machine, too long for CI; without it the test checks the
# workload's built-in split only). Only what is missing is installed.
set -euo pipefail
need=()
command -v ruby >/dev/null || need+=(ruby)
command -v php >/dev/null || need+=(php-cli)
compgen -G '/usr/sbin/php-fpm*' >/dev/null || need+=(php-fpm)
command -v perl >/dev/null || need+=(perl)
command -v nytprofcalls >/dev/null || need+=(libdevel-nytprof-perl)
perl_core="$(perl -MConfig -e 'print $Config{archlibexp}' 2>/dev/null || true)/CORE/perl.h"
[ -f "$perl_core" ] || need+=(libperl-dev)
command -v cc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
    echo "interpreters.sh: installing ${need[*]}"
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi
RBSPY_VERSION=0.55.0
cache="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}/rbspy"
if [ "${HOTSTACK_BENCH_PEERS:-0}" = "1" ] && { [ ! -x "$cache/bin/rbspy" ] ||
        [ "$(cat "$cache/VERSION" 2>/dev/null)" != "$RBSPY_VERSION" ]; }; then
    if command -v cargo >/dev/null; then
        echo "interpreters.sh: building rbspy $RBSPY_VERSION (cargo, once; cached in $cache)"
        target="$(mktemp -d)"
        if cargo install --quiet --locked rbspy --version "$RBSPY_VERSION" --root "$cache" --target-dir "$target"; then
            echo "$RBSPY_VERSION" > "$cache/VERSION"
        else
            echo "interpreters.sh: warning: rbspy did not build: the Ruby share test compares with its built split only" >&2
        fi
        rm -rf "$target"
    else
        echo "interpreters.sh: warning: no cargo: rbspy is not built (the Ruby share test compares with its built split only)" >&2
    fi
fi
