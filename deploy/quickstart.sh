#!/usr/bin/env bash
# The README's first command: installs dependencies, builds ktune in ./build
# and runs the main job. Until the embedded tuner (`ktune tune`) lands, the
# main job lists ResNet-18's tasks and samples, compiles and verifies random
# schedules of a 512x512x512 matmul on this CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [ -f build/build.ninja ]; then meson setup --reconfigure build >/dev/null; else meson setup build >/dev/null; fi
ninja -C build
./build/tracker/ktune --version
./build/tracker/ktune tasks --network resnet-18 --layout NHWC --batch 1 | grep -E '^(=+ Task|weight:)'
./build/tracker/ktune kernel sample --workload '{"op": "matmul", "M": 512, "N": 512, "K": 512}' \
  --target cpu -n 8 --seed 1 --verify
