#!/usr/bin/env bash
# Peers of tests/python: the distribution's CPython (its interpreter, and its headers for the small C
# extension the mixed-stack test builds). Interpreters installed with pyenv (3.8-3.13 under
# $PYENV_ROOT or ~/.pyenv) are tested too where present; CI needs at least /usr/bin/python3.
set -euo pipefail
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
compgen -G '/usr/include/python3*/Python.h' >/dev/null || need+=(python3-dev)
command -v gcc >/dev/null || need+=(gcc)
"$(dirname "$0")/../apt-install" "${need[@]}"
/usr/bin/python3 -c 'import sys; assert sys.version_info >= (3, 8), sys.version'
