#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, for a machine that has one (the test
# suites skip them elsewhere; see tests/kt_skip.h). On a machine without a
# GPU it says so and exits 0 with "no GPU".
#
# With a GPU it runs, against the first device:
#   1. every operator family's sampled GPU states (Winograd with tiles 2 and 4
#      too) through
#      `ktune kernel sample --target cuda --arch sm_XY --verify`: NVRTC for the
#      device's architecture, the CUDA text run on the CPU, and the kernels run
#      by the Driver API runner on the GPU against the reference;
#   2. the suites whose tests need a GPU (cuda, gpu, runtime), which must skip
#      nothing;
#   3. a `--target cuda` tuning job through an embedded tracker, a worker and
#      a `--device cuda:0` runner (`ktune tune`), for a few trials;
#   4. `ktune run --target cuda` of ResNet-18 against the CPU build's output;
#   5. the same with `--winograd`, from a store whose only record is a GPU
#      Winograd kernel of one layer (so the build must use it there);
# then prints a summary and exits 1 if anything failed.
#
# usage: deploy/gpu-check.sh [BUILD_DIR]   (default ./build; built when missing)
# environment: KT_GPU_CHECK_STATES (states per family, default 8),
#              KT_GPU_CHECK_TRIALS (tuning trials, default 16),
#              KT_GPU_CHECK_STEPS (the steps to run, default "1 2 3 4 5")
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
states="${KT_GPU_CHECK_STATES:-8}"
trials="${KT_GPU_CHECK_TRIALS:-16}"
steps=" ${KT_GPU_CHECK_STEPS:-1 2 3 4 5} "
step() { [[ "$steps" == *" $1 "* ]]; }

# A GPU is one the driver lists; no nvidia-smi, no driver, or no device: none.
gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null | grep -v '^$' || true)
fi
if [ -z "$gpus" ]; then
  echo "gpu-check: no GPU (nvidia-smi lists no NVIDIA device): nothing to run"
  exit 0
fi
first=$(printf '%s\n' "$gpus" | head -n 1)
cap=$(printf '%s' "$first" | awk -F', *' '{print $NF}')
arch="sm_${cap/./}"
echo "gpu-check: GPU ${first%,*} (compute capability $cap, $arch)"

if [ ! -x "$build/cli/ktune" ]; then
  if [ -f "$build/build.ninja" ]; then :; else meson setup "$build" >/dev/null || exit 1; fi
  ninja -C "$build" || exit 1
fi
ktune="$build/cli/ktune"
if ! grep -q '#define KT_HAVE_CUDA 1' "$build/kt_config.h"; then
  echo "gpu-check: $build was configured without CUDA (NVRTC): rebuild with the toolkit in /usr/local/cuda" >&2
  exit 1
fi

tmp=$(mktemp -d /tmp/ktune-gpu-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
summary=()
failed=0
record() {   # name, status, detail
  if [ "$2" -eq 0 ]; then summary+=("ok      $1: $3"); else summary+=("FAILED  $1: $3"); failed=1; fi
}

# 1. every operator family on the GPU
families=(
  'matmul|{"op":"matmul","M":128,"N":96,"K":64}'
  'dense|{"op":"dense","M":4,"N":256,"K":128,"epilogue":["bias_add","relu"]}'
  'batch_matmul|{"op":"batch_matmul","B":4,"M":32,"N":48,"K":64}'
  'conv2d_nhwc|{"op":"conv2d_nhwc","N":1,"H":14,"W":14,"CI":16,"CO":32,"KH":3,"KW":3,"padding":[1,1]}'
  'winograd_t2|{"op":"conv2d_winograd_nhwc","N":1,"H":14,"W":14,"CI":16,"CO":32,"KH":3,"KW":3,"padding":[1,1],"tile_size":2}'
  'winograd_t4|{"op":"conv2d_winograd_nhwc","N":1,"H":14,"W":14,"CI":16,"CO":32,"KH":3,"KW":3,"padding":[1,1],"tile_size":4}'
  'conv2d_nchw|{"op":"conv2d_nchw","N":1,"H":14,"W":14,"CI":16,"CO":32,"KH":3,"KW":3,"stride":[2,2]}'
  'depthwise|{"op":"depthwise_conv2d_nhwc","N":1,"H":16,"W":16,"C":32,"KH":3,"KW":3,"padding":[1,1]}'
  'pool2d|{"op":"pool2d","kind":"max","N":1,"H":16,"W":16,"C":32,"KH":3,"KW":3,"stride":[2,2]}'
  'global_avg_pool|{"op":"global_avg_pool","N":2,"H":7,"W":7,"C":128}'
  'softmax|{"op":"softmax","shape":[64,1000]}'
  'layer_norm|{"op":"layer_norm","shape":[32,768],"affine":true}'
)
for f in "${families[@]}"; do
  step 1 || break
  name=${f%%|*}
  wl=${f#*|}
  out="$tmp/$name.txt"
  "$ktune" kernel sample --workload "$wl" --target cuda --arch "$arch" -n "$states" --seed 1 \
      --verify >"$out" 2>&1
  rc=$?
  last=$(tail -n 1 "$out")
  if [ $rc -eq 0 ] && ! grep -q "; GPU $arch max error" "$out"; then
    rc=1
    last="$last, but no kernel ran on the GPU"
  fi
  record "kernel sample $name" $rc "$last"
  [ $rc -eq 0 ] || grep -E "FAILED|UNVERIFIED|no GPU" "$out" | head -n 3 | sed 's/^/        /'
done

# 2. the suites whose tests need a GPU: nothing may be skipped here
for suite in cuda gpu runtime; do
  step 2 || break
  meson test -C "$build" "$suite" >"$tmp/suite-$suite.txt" 2>&1
  rc=$?
  skips="$build/tests/test_$suite.skips"
  nskip=$( [ -f "$skips" ] && wc -l <"$skips" || echo 0)
  if [ $rc -eq 0 ] && [ "$nskip" -gt 0 ]; then
    rc=1
  fi
  record "suite $suite" $rc "exit $rc, $nskip skipped"
done

# 3. a cuda tuning job: tracker, worker and a --device cuda:0 runner
if step 3; then
  "$ktune" tune --workload '{"op":"matmul","M":256,"N":256,"K":256}' --target cuda \
      --trials "$trials" --per-round 8 --db "$tmp/gpu.db" >"$tmp/tune.txt" 2>&1
  rc=$?
  record "tune --target cuda ($trials trials)" $rc "exit $rc: $(grep -m1 -iE 'best|error' "$tmp/tune.txt" || tail -n 1 "$tmp/tune.txt")"
  [ $rc -eq 0 ] || tail -n 5 "$tmp/tune.txt" | sed 's/^/        /'
fi

# Largest difference of two .npy files relative to the second's largest magnitude.
npy_diff() {
  /usr/bin/python3 -c "import numpy as n, sys; a=n.load(sys.argv[1]); b=n.load(sys.argv[2]); print('%.3g' % (abs(a-b).max()/abs(b).max()))" \
      "$1" "$2" 2>/dev/null || echo nan
}
within() { /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-4 else 1)" "$1"; }

# 4. ResNet-18 built for the GPU against the CPU build: same seed, same weights, default
#    schedules on both (an empty store: ResNet-18's tasks have no records there)
if step 4 || step 5; then
  : >"$tmp/none.jsonl"
  "$ktune" records import --db "$tmp/empty.db" --in "$tmp/none.jsonl" >/dev/null
  "$ktune" run --network resnet-18 --seed 3 --repeat 3 --no-winograd --output "$tmp/r18_cpu.npy" \
      --db "$tmp/empty.db" >"$tmp/r18_cpu.txt" 2>&1 || true
fi
if step 4; then
  "$ktune" run --network resnet-18 --seed 3 --repeat 20 --target cuda --arch "$arch" \
      --output "$tmp/r18_gpu.npy" --db "$tmp/empty.db" >"$tmp/r18_gpu.txt" 2>&1
  rc=$?
  diff=$(npy_diff "$tmp/r18_gpu.npy" "$tmp/r18_cpu.npy")
  [ $rc -eq 0 ] && ! within "$diff" && rc=1
  record "run --target cuda resnet-18" $rc "exit $rc, $(tail -n 1 "$tmp/r18_gpu.txt"), off the CPU build by $diff"
fi

# 5. Winograd on the GPU in a network: a store whose only record is a GPU Winograd kernel
#    of ResNet-18's 14x14x256 layer (its direct task has none), so the build runs it there
if step 5; then
  wino='{"op":"conv2d_winograd_nhwc","N":1,"H":14,"W":14,"CI":256,"CO":256,"KH":3,"KW":3,"padding":[1,1],"epilogue":["bias_add","relu"],"tile_size":2}'
  "$ktune" tune --workload "$wino" --target cuda --trials 8 --per-round 8 \
      --db "$tmp/wino.db" >"$tmp/wino_tune.txt" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    "$ktune" run --network resnet-18 --seed 3 --repeat 20 --target cuda --arch "$arch" \
        --winograd --output "$tmp/r18_wgpu.npy" --db "$tmp/wino.db" >"$tmp/r18_wgpu.txt" 2>&1
    rc=$?
  fi
  used=$(grep -c "(Winograd)): faster than task" "$tmp/r18_wgpu.txt" 2>/dev/null)
  diff=$(npy_diff "$tmp/r18_wgpu.npy" "$tmp/r18_cpu.npy")
  [ $rc -eq 0 ] && { [ "${used:-0}" -eq 0 ] || ! within "$diff"; } && rc=1
  record "run --target cuda --winograd resnet-18" $rc "exit $rc, Winograd kernels for ${used:-0} task(s), off the CPU build by $diff"
  [ $rc -eq 0 ] || tail -n 3 "$tmp/wino_tune.txt" "$tmp/r18_wgpu.txt" 2>/dev/null | sed 's/^/        /'
fi

echo
echo "gpu-check summary ($arch):"
printf '  %s\n' "${summary[@]}"
exit $failed
