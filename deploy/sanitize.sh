#!/usr/bin/env bash
# Builds ktune with AddressSanitizer and UndefinedBehaviorSanitizer in
# ./build-san (its own build directory: set up on first use, then rebuilt
# incrementally) and runs every Check suite there, as deploy/test.sh does for
# ./build; .ci/run calls it after the plain suite. Arguments go to `meson
# test` (a suite name runs that suite only). Its last line is "N passed, N
# failed, N skipped" (tests/ck_summary.py).
#
# A sanitizer report fails the process that made it, so the test case (or
# the daemon the case started and checks the exit status of) fails: ASan
# stops at its first error by default, UBSan is compiled without recovery
# (-fno-sanitize-recover) and told to halt in UBSAN_OPTIONS as well; both
# exit with status 1. Leaks are reported at exit (detect_leaks=1) and fail
# the process too, but for glibc's own blocks in deploy/lsan.supp. The
# sanitized programs run a few times slower: meson's and Check's timeouts are
# multiplied by 3, and the multi-process suites widen their own waits
# (tests/kt_test_proc.h, KT_TEST_SLOW).
# Environment: KT_SAN_BUILD (build directory, default build-san).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KT_SAN_BUILD:-build-san}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:exitcode=1}
# glibc-internal blocks only (deploy/lsan.supp says which and why)
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/deploy/lsan.supp:print_suppressions=0}
export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-3}
# shellcheck source=deploy/suite.sh
. deploy/suite.sh
rc=0
kt_suite "$build" 3 -Db_sanitize=address,undefined -Db_lundef=false \
  "-Dc_args=-fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -- "$@" || rc=$?
exit "$rc"
