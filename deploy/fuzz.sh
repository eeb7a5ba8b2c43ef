#!/bin/sh
# Build the libFuzzer targets (fuzz/) with clang, ASan and UBSan in their own
# build directory and run each for SECONDS (default 60) from its seed corpus
# in fuzz/corpus/<target>/. Prints per target "fuzz TARGET: N execs, C crashes"
# and last "fuzz: T targets, N execs, C crashes"; exits 1 on any crash, keeping
# the reproducer in $KT_FUZZ_OUT (default build-fuzz/artifacts/<target>/).
#   deploy/fuzz.sh [SECONDS] [TARGET...]
# Environment: KT_FUZZ_BUILD (build directory, default build-fuzz);
#   KT_FUZZ_RUNS=N stops each target after N executions (SECONDS stays the
#   cap), for release runs measured in executions;
#   KT_FUZZ_CORPUS=DIR keeps each target's corpus in DIR/<target>/ between
#   runs (seeded from fuzz/corpus/<target>/ and grown by every run), so a long
#   run goes on from where the last one stopped instead of from the seeds.
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
case $secs in ''|*[!0-9]*) echo "usage: deploy/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2;; esac
build=${KT_FUZZ_BUILD:-build-fuzz}
out=${KT_FUZZ_OUT:-$build/artifacts}
runs=${KT_FUZZ_RUNS:-}
case ${runs:-0} in *[!0-9]*) echo "fuzz: KT_FUZZ_RUNS must be a number of executions" >&2; exit 2;; esac
keep=${KT_FUZZ_CORPUS:-}
command -v clang >/dev/null || { echo "fuzz: clang not found (deploy/install-deps.sh installs it)" >&2; exit 2; }

targets=${*:-"workload netjson state onnx import npy safetensors rpc_tracker rpc_runner rpc_worker"}
if [ ! -f "$build/build.ninja" ]; then
    # werror off: clang warns about things gcc does not, and this build is
    # for finding crashes, not for policing warnings (the gcc build does).
    CC=clang meson setup "$build" -Dfuzz=true -Dwerror=false -Dbuildtype=debugoptimized \
        -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer' \
        >"${TMPDIR:-/tmp}/kt-fuzz-setup.$$.log" 2>&1 ||
        { cat "${TMPDIR:-/tmp}/kt-fuzz-setup.$$.log" >&2; rm -f "${TMPDIR:-/tmp}/kt-fuzz-setup.$$.log"; exit 2; }
    rm -f "${TMPDIR:-/tmp}/kt-fuzz-setup.$$.log"
fi
bins=""
for t in $targets; do bins="$bins fuzz/fuzz_$t"; done
# shellcheck disable=SC2086
ninja -C "$build" $bins >"$build/fuzz-build.log" 2>&1 || { tail -40 "$build/fuzz-build.log" >&2; exit 2; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export KT_LOG_LEVEL=error
total_execs=0 total_crashes=0 n=0
for t in $targets; do
    n=$((n + 1))
    if [ -n "$keep" ]; then
        work="$keep/$t"
        mkdir -p "$work"
    else
        work=$(mktemp -d)
    fi
    # Reproducers are kept from the last run only.
    rm -rf "$out/$t"
    mkdir -p "$out/$t"
    # The seed corpus stays read-only: new inputs go to a scratch directory.
    log="$build/fuzz-$t.log"
    set +e
    "$build/fuzz/fuzz_$t" -max_total_time="$secs" ${runs:+-runs="$runs"} -max_len=65536 -rss_limit_mb=4096 \
        -timeout=25 -print_final_stats=1 -artifact_prefix="$out/$t/" \
        "$work" "fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    set -e
    # Corpus size: the seeds plus what this run added (libFuzzer's last "corp: N/SIZE").
    corpus=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | sed 's/^corp: //')
    [ -n "$keep" ] || rm -rf "$work"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    crashes=$(find "$out/$t" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o \
        -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1
    echo "fuzz $t: $execs execs, $crashes crashes, corpus ${corpus:-0/0b}"
    if [ "$crashes" -gt 0 ]; then
        grep -m1 -A12 'ERROR: \|runtime error' "$log" >&2 || tail -20 "$log" >&2
        ls "$out/$t" >&2
    fi
    total_execs=$((total_execs + execs))
    total_crashes=$((total_crashes + crashes))
done
echo "fuzz: $n targets, $total_execs execs, $total_crashes crashes"
[ "$total_crashes" -eq 0 ]
