#!/usr/bin/env bash
# Builds libbagua, the bagua command and the recipe and data tests with
# AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/, and runs
# those tests: the code that reads what a user hands bagua (recipes, CSV,
# JSONL, IDX and tensor files), the fuzz tests included; the tests that run
# `bagua validate` run the instrumented binary. An out-of-bounds access, a
# use-after-free, a leak, undefined behaviour or an allocation of more than
# 1 GiB at once (no test input needs that much; a size read from a corrupt
# file does) fails them: the sanitizer's report, then a non-zero exit.
# scripts/test.sh runs it after the ThreadSanitizer build.
#
# Cheap on purpose (CI has 2 cores): -O1 with line tables only (-g1), only
# the targets these tests need (the front command, libbagua_recipe, the
# data area: not bagua-runtime, the collectives, training, launch, plan or
# bench areas, examples, benchmarks, other test areas or header checks;
# tests/CMakeLists.txt links these two binaries that narrowly), and fewer fuzz cases than the main suite runs:
# 500 recipe and 166 data mutations in-process (the main suite's first
# ones), 8 through the binary (each run of the instrumented bagua costs
# about 2 s of start-up). The corpus tests that run the instrumented
# bagua once per shipped recipe are left out (about 200 s): their in-process
# twins (RecipeCorpus.*InProcess) run the same recipes through the same
# loader, and the binary fuzz test covers the command's own path.
# The data tests run up to 6 cases per process (-DBAGUA_TEST_GROUP=6,
# docs/building.md): an instrumented process that loads LibTorch costs
# about 3.4 s of CPU before its first case. The recipe tests' binary loads
# no LibTorch and keeps one case per test.
# GCC 12 warns "may be used uninitialized" inside
# <regex> at -O1 with the sanitizers (a known false positive, GCC bug
# 105616); that warning is off here, and stays on in the main build.
#
# LibTorch is not instrumented: ASan still sees every allocation (it
# replaces malloc and new), not LibTorch's own memory accesses. No report
# from uninstrumented code has needed a suppression so far (no new/delete
# mismatch, ODR or leak report from LibTorch, no UBSan vptr report on its
# types), so none is configured; add one, with its reason, only for such a
# report.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build-asan/CMakeCache.txt ]; then generator=(-G Ninja); fi
cmake -S . -B build-asan "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBAGUA_BUILD_BENCH=OFF -DBAGUA_TEST_GROUP=6 \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="$sanitize -fno-omit-frame-pointer -Wno-maybe-uninitialized" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitize" -DCMAKE_SHARED_LINKER_FLAGS="$sanitize" >/dev/null
# Set before the build too: gtest_discover_tests runs each test binary.
export ASAN_OPTIONS="max_allocation_size_mb=1024 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 ${UBSAN_OPTIONS:-}"
cmake --build build-asan -j "$(nproc)" --target bagua test_recipe test_data
BAGUA_FUZZ_CASES=${BAGUA_FUZZ_CASES:-500} BAGUA_FUZZ_BINARY_CASES=${BAGUA_FUZZ_BINARY_CASES:-8} \
  ctest --test-dir build-asan --output-on-failure -j "$(nproc)" --timeout 600 -L '^(recipe|data)$' \
  -E '^RecipeCorpus\.BaguaValidate'
