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
#
# A new build directory compiles through ccache when it is installed
# (install-deps.sh installs it), with paths made relative to the source
# tree, the compiler checked by content and the locale unset: the same
# sources compiled in another checkout, or in the Docker image's build
# stage (which is given this cache by scripts/docker-test.sh), hit it. CCACHE_DIR moves
# the cache (default ~/.cache/ccache); BAGUA_CCACHE_STATS=1 prints its
# hit counts after the build.
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
launcher=()
if command -v ccache >/dev/null 2>&1 && [ ! -f "$dir/CMakeCache.txt" ]; then
  # ccache hashes the locale variables (they change the compiler's
  # messages): unset, so a machine and a container without them agree.
  # The kernel's UAPI headers (/usr/include/linux, package linux-libc-dev)
  # are left out of the cache's manifests: a machine whose image lags the
  # mirror's point releases and a container installed from the mirror
  # differ in them (linux/stddef.h, included by every area that uses
  # sockets or threads), and that alone made half of the image's build
  # stage miss. They define the kernel's stable ABI, which our code only
  # reads.
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;-u;LANG;-u;LC_ALL;-u;LC_CTYPE;-u;LC_MESSAGES;CCACHE_BASEDIR=$PWD;CCACHE_DEPEND=1;CCACHE_COMPILERCHECK=content;CCACHE_IGNOREHEADERS=/usr/include/linux;ccache")
fi
cmake -S . -B "$dir" "${generator[@]}" "${launcher[@]}" "${extra[@]}" "$@" >/dev/null
if [ "${BAGUA_CCACHE_STATS:-}" = 1 ]; then ccache --zero-stats >/dev/null 2>&1 || true; fi
cmake --build "$dir" -j "$(nproc)"
if [ "${BAGUA_CCACHE_STATS:-}" = 1 ]; then ccache --show-stats 2>/dev/null | grep -Ei "hits|misses" || true; fi
