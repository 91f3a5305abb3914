#!/usr/bin/env bash
# Peers of tests/top (a real terminal: tmux) and of the README screenshots and UI tests (Chromium).
set -euo pipefail
missing=()
command -v tmux >/dev/null || missing+=(tmux)
command -v chromium >/dev/null || missing+=(chromium)
command -v cc >/dev/null || missing+=(gcc)
"$(dirname "$0")/../apt-install" "${missing[@]}"
fc-list 2>/dev/null | grep -qi "dejavu sans mono" || "$(dirname "$0")/../apt-install" fonts-dejavu-core
