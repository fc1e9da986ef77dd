#!/usr/bin/env bash
# Configures and builds bagua into build/ (Release, Ninja when available).
# Extra arguments go to CMake's configure step, e.g. -DBAGUA_BUILD_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build/CMakeCache.txt ]; then generator=(-G Ninja); fi
cmake -S . -B build "${generator[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
