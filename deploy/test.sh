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
# shellcheck source=deploy/suite.sh
. deploy/suite.sh
rc=0
kt_suite build 1 -- "$@" || rc=$?
exit "$rc"
