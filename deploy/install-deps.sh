#!/usr/bin/env bash
# Installs every Debian 12 package that building, running and testing ktune
# need. Idempotent: packages already present are left alone. Needs root (or
# sudo). CUDA is never installed here: it is used when /usr/local/cuda (or
# $KT_CUDA_ROOT) already holds the toolkit.
set -euo pipefail

PACKAGES=(
  # build (build-essential brings g++ too: the CUDA kernels' CPU check compiles with it)
  build-essential pkg-config meson ninja-build
  # libktune and the daemons
  libgrpc-dev libssl-dev protobuf-c-compiler libprotobuf-c-dev libsqlite3-dev libxgboost-dev
  libevent-dev libjansson-dev libxxhash-dev
  # tests
  check libsubunit-dev openssl sqlite3 systemd python3-yaml python3-grpcio python3-grpc-tools python3-torch python3-torchvision python3-onnx
  iproute2   # ip netns: the hosts suite
  # the Python package and its test (python/, tests/python): a venv and an offline pip install
  python3-venv python3-pip python3-setuptools python3-wheel python3-numpy python3-protobuf
  # benchmarks
  libopenblas-dev libdnnl-dev hyperfine
  # fuzzing (deploy/fuzz.sh: libFuzzer with ASan and UBSan)
  clang
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: run as root (or install sudo)" >&2; exit 1
  fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
fi

cuda="${KT_CUDA_ROOT:-/usr/local/cuda}"
if [ -f "$cuda/include/nvrtc.h" ] && [ -f "$cuda/include/cuda.h" ]; then
  ver=$("$cuda/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)
  echo "install-deps: CUDA toolkit found in $cuda${ver:+ (release $ver)}: NVRTC and Driver API support will be built"
else
  echo "install-deps: no CUDA toolkit in $cuda: building the CPU target only"
fi
