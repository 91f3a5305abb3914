#!/usr/bin/env bash
# arm64 (issue 13). Always (small): the arm64 UAPI headers that `make bpf` builds the arm64 objects
# with (linux-libc-dev-arm64-cross: headers only, architecture-independent) and Debian's aarch64
# cross compiler and libc (tests/kernels/test_arm64.py builds an arm64 binary and reads arm64 CFI).
# With HOTSTACK_ARM64=1 (`make test-arm64`), the VM run's tools: qemu-system-aarch64, mmdebstrap and
# qemu-user-static with binfmt_misc (mmdebstrap runs the arm64 packages' scripts through it), and
# arch-test, which mmdebstrap needs for a foreign architecture (only a Recommends of mmdebstrap: a
# fresh machine with --no-install-recommends has none: "install arch-test for foreign architecture
# support"). The VM run is slow under emulation (~20-40 min): not part of `.ci/run`.
set -euo pipefail
need=()
[ -e /usr/aarch64-linux-gnu/include/asm/ptrace.h ] || need+=(linux-libc-dev-arm64-cross)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
[ -e /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
if [ "${HOTSTACK_ARM64:-0}" = 1 ]; then
    for pair in qemu-system-aarch64:qemu-system-arm mmdebstrap:mmdebstrap qemu-aarch64-static:qemu-user-static \
                update-binfmts:binfmt-support arch-test:arch-test mke2fs:e2fsprogs debugfs:e2fsprogs; do
        command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
    done
    [ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "arm64.sh: installing ${need[*]}"
    "$(dirname "$0")/../apt-install" "${need[@]}"
fi
if [ "${HOTSTACK_ARM64:-0}" = 1 ]; then
    # arm64 binaries run through qemu-user: binfmt_misc mounted and the aarch64 entry enabled
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
fi
