#!/usr/bin/env bash
# Installs every Debian package that bagua's build, tests, benchmarks and
# quickstart need. Idempotent: packages already installed are skipped, and when
# nothing is missing it does no network work at all.
#
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev          # LibTorch 1.13 (CPU): tensors, autograd, TorchScript, c10d
  libgloo-dev           # headers that c10d's ProcessGroupGloo.hpp includes
  libyaml-cpp-dev       # recipe parsing
  libcli11-dev          # command line
  nlohmann-json3-dev    # JSON trees (recipes, metrics)
  libvalijson-dev       # JSON Schema validation of recipes
  zlib1g-dev            # gzipped IDX data sets (zlib inflate)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (Event protos, engine/src/train/tensorboard_event.proto)
  python3-protobuf      # tests read the event files back independently (tests/metrics/read_tfevents.py)
  libhiredis-dev        # Redis client (dataset cache)
  redis-server          # Redis server (spawned by the cache and its tests)
  libgtest-dev libgmock-dev
  libbenchmark-dev
  dataset-fashion-mnist # the real data set the quickstart and tests use
  python3-torch         # exports TorchScript test models; PyTorch DDP baseline
  libopenblas0-openmp   # a fast BLAS for LibTorch (the default libblas3 is the slow reference one); honours OMP_NUM_THREADS
  iproute2 procps
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
