#!/usr/bin/env bash
# The README's first command: installs dependencies, builds ktune in ./build
# and runs the main job on the embedded default. Until the embedded tuner
# lands (issue "distributed service"), the main job is a smoke run of the
# binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [ -f build/build.ninja ]; then meson setup --reconfigure build >/dev/null; else meson setup build >/dev/null; fi
ninja -C build
./build/tracker/ktune --version
./build/tracker/ktune-tracker --help
