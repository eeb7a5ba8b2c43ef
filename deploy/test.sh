#!/usr/bin/env bash
# Builds ktune from scratch in ./build and runs the whole test suite.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [ -f build/build.ninja ]; then
  meson setup --reconfigure build
else
  meson setup build
fi
ninja -C build
meson test -C build --print-errorlogs --num-processes 2 "$@"
