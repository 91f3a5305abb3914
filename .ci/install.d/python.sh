#!/usr/bin/env bash
# Peers of tests/python: the distribution's CPython (its interpreter, and its headers for the small C
# extension the mixed-stack test builds). Interpreters installed with pyenv (3.8-3.13 under
# $PYENV_ROOT or ~/.pyenv) are tested too where present; CI needs at least /usr/bin/python3.
set -euo pipefail
apt-get install -y -qq --no-install-recommends python3 python3-dev gcc >/dev/null
/usr/bin/python3 -c 'import sys; assert sys.version_info >= (3, 8), sys.version'
