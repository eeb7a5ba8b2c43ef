#!/usr/bin/env bash
# The README's first command: installs dependencies, builds ktune in ./build
# and runs the main job on the embedded default: `ktune tune` starts its own
# tracker, worker and CPU runner on 127.0.0.1, tunes one 512x512x512 matmul
# for 64 trials (a few minutes on 2 cores), prints the task scheduler table
# after every round and the best kernel at the end, and stops them. The
# records go to ./ktune.db: running this again resumes from there (nothing
# stored is measured again), and `ktune status`, `ktune best --job 1` and
# `ktune export --job 1 --format c --out kernels` read it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [ -f build/build.ninja ]; then meson setup --reconfigure build >/dev/null; else meson setup build >/dev/null; fi
ninja -C build
./build/cli/ktune --version
./build/cli/ktune tune --workload '{"op":"matmul","M":512,"N":512,"K":512}' \
    --trials 64 --per-round 16 --db ktune.db
./build/cli/ktune status --db ktune.db
