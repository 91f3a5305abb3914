#!/usr/bin/env bash
# Inside a VM booted by tests/kernels/matrix.py: unpack the payload into a tmpfs, mount what a
# host normally has mounted, and run the smoke suite with Debian's python3.
#   guest.sh PAYLOAD.tar RESULTS.json [--only ITEM ...]
set -u
payload="$1" results="$2"
mount -t tmpfs tmpfs /tmp
mkdir -p /tmp/hs
tar -xf "$payload" -C /tmp/hs || { echo "guest: cannot unpack $payload"; exit 1; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug
ip link set lo up 2>/dev/null
# The classic default limit, so that kernels before 5.11 show the loader raising it.
ulimit -l 64
export PYTHONHOME=/tmp/hs/prefix PYTHONPATH=/tmp/hs/site PYTHONDONTWRITEBYTECODE=1 HOME=/tmp
# (-X faulthandler: a crash of the interpreter prints where it was)
exec /usr/bin/python3 -X faulthandler /tmp/hs/smoke.py --workloads /tmp/hs/workloads --out "$results" "${@:3}"
