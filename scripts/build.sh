#!/usr/bin/env bash
# Configures and builds bagua (Release, Ninja when available).
#
#   scripts/build.sh [CMAKE_ARGS...]          CPU build into build/, against
#                                            Debian's LibTorch (libtorch-dev)
#   scripts/build.sh --cuda [CMAKE_ARGS...]   CUDA build into build-cuda/,
#                                            against the LibTorch inside the
#                                            PyTorch wheel of `python3` (or
#                                            $BAGUA_PYTHON); see docs/building.md
#
# Extra arguments go to CMake's configure step, e.g. -DBAGUA_BUILD_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
extra=()
if [ "${1:-}" = "--cuda" ]; then
  shift
  dir=build-cuda
  py=${BAGUA_PYTHON:-python3}
  if ! prefix=$("$py" -c 'import torch; assert torch.version.cuda, "this torch has no CUDA"; print(torch.utils.cmake_prefix_path)' 2>&1); then
    echo "build.sh --cuda: $py cannot provide a CUDA LibTorch: $prefix" >&2
    echo "  (install a PyTorch wheel with CUDA, or point BAGUA_PYTHON at a python that has one)" >&2
    exit 2
  fi
  extra=(-DCMAKE_PREFIX_PATH="$prefix")
  # nvcc: LibTorch's CMake config and bagua's kernels need the CUDA compiler.
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH=/usr/local/cuda/bin:$PATH
  fi
fi
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f "$dir/CMakeCache.txt" ]; then generator=(-G Ninja); fi
cmake -S . -B "$dir" "${generator[@]}" "${extra[@]}" "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
