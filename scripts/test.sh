#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (the README's test
# command): the whole suite, then the ThreadSanitizer build of the tests
# whose code runs threads of its own (scripts/tsan-test.sh), then the
# AddressSanitizer + UBSan build of the recipe and data tests, the code
# that reads user input (scripts/asan-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
bash scripts/tsan-test.sh
bash scripts/asan-test.sh
