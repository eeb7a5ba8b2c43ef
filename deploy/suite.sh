# Shared by deploy/test.sh and deploy/sanitize.sh (sourced, not run): build
# ktune in one build directory and run every Check suite there, counting test
# cases. No `set` here: the sourcing script chooses its shell options.
#
#   kt_suite BUILD TIMEOUT_MULTIPLIER [MESON_SETUP_OPTION...] -- [MESON_TEST_ARG...]
#
# Sets BUILD up on first use (with the setup options; later runs reconfigure
# with them), builds it, runs `meson test` with its timeouts multiplied by
# TIMEOUT_MULTIPLIER (the arguments after -- are the caller's: a suite name
# runs that suite only) and then tests/ck_summary.py, whose last line is "N passed, N failed,
# N skipped". Returns 0 only when both succeeded.
kt_suite() {
  local build=$1 multiplier=$2
  shift 2
  local setup=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
    setup+=("$1")
    shift
  done
  [ "$#" -gt 0 ] && shift
  if [ -f "$build/build.ninja" ]; then
    meson setup --reconfigure "$build" "${setup[@]}" || return 1
  else
    meson setup "$build" "${setup[@]}" || return 1
  fi
  ninja -C "$build" || return 1
  # Only this run's logs may be counted: meson's test log, Check's XML log and
  # the recorded skips of every suite.
  rm -f "$build"/meson-logs/testlog.json "$build"/meson-logs/testlog.txt \
        "$build"/tests/test_*.xml "$build"/tests/test_*.skips
  local rc=0
  meson test -C "$build" --print-errorlogs --num-processes 2 \
    --timeout-multiplier "$multiplier" "$@" || rc=$?
  local subset=()
  if [ "$#" -gt 0 ]; then subset=(--subset); fi
  python3 tests/ck_summary.py "$build" "${subset[@]}" || rc=1
  return "$rc"
}
