#!/usr/bin/env bash
# Builds ktune in ./build (set up on first use, then rebuilt incrementally)
# and runs every Check suite. This is the README's test command; .ci/run
# calls it. Arguments go to `meson test` (a suite name runs that suite only).
#
# Its last line counts test cases, not suites: "N passed, N failed, N
# skipped" (tests/ck_summary.py, from Check's XML log of each suite), after
# one line per skipped or failed case. The only allowed skip is a test that
# needs a GPU on a machine without one (tests/kt_skip.h).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
if [ -f build/build.ninja ]; then
  meson setup --reconfigure build
else
  meson setup build
fi
ninja -C build
# Only this run's logs may be counted: meson's test log, Check's XML log and
# the recorded skips of every suite.
rm -f build/meson-logs/testlog.json build/meson-logs/testlog.txt \
      build/tests/test_*.xml build/tests/test_*.skips
rc=0
meson test -C build --print-errorlogs --num-processes 2 "$@" || rc=$?
subset=()
if [ "$#" -gt 0 ]; then subset=(--subset); fi
python3 tests/ck_summary.py build "${subset[@]}" || rc=1
exit "$rc"
