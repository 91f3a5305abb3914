#!/usr/bin/env bash
# The kernel matrix (tests/kernels, issue 13): qemu for x86-64 (TCG), kmod (depmod, for the
# Debian kernels' modules), and virtme-ng from PyPI in a venv of its own under $HOTSTACK_CACHE,
# keyed by version. The Debian kernels themselves are fetched and cached by tests/kernels/matrix.py.
set -euo pipefail
CACHE="${HOTSTACK_CACHE:-/var/cache/hotstack-ci}"
VIRTME_NG_VERSION=1.42
# busybox: virtme-run builds its initramfs from it (a fresh machine has none: "initramfs is needed,
# and no busybox was found"); the static one needs no libraries inside the initramfs.
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v depmod >/dev/null || ! command -v file >/dev/null \
        || ! command -v busybox >/dev/null; then
    "$(dirname "$0")/../apt-install" qemu-system-x86 kmod file debian-archive-keyring busybox-static
fi
venv="$CACHE/virtme-ng"
if [ "$(cat "$venv/version" 2>/dev/null)" != "$VIRTME_NG_VERSION" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "virtme-ng==$VIRTME_NG_VERSION"
    echo "$VIRTME_NG_VERSION" >"$venv/version"
fi
