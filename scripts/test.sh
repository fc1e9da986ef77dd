#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (the README's test
# command): the whole suite, then the ThreadSanitizer build of the tests
# whose code runs threads of its own (scripts/tsan-test.sh), then the
# AddressSanitizer + UBSan build of the recipe and data tests, the code
# that reads user input (scripts/asan-test.sh), and last the Docker image:
# built (its build stage reusing this build's ccache) and tested
# (scripts/docker-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The image's base and its package stages (downloads and unpacking, little
# CPU) are made in the background while this machine compiles.
prepare_log=$(mktemp /tmp/bagua-docker-prepare.XXXXXX)
bash scripts/docker-test.sh --prepare > "$prepare_log" 2>&1 &
prepare=$!
trap 'kill "$prepare" 2>/dev/null || true' EXIT
# Each phase's wall time, printed as it ends and summed up at the end, so
# that CI's budget (45 minutes on 2 cores) can be watched phase by phase.
timings=()
phase() {
  local name=$1 start
  shift
  start=$(date +%s)
  "$@"
  timings+=("$name $(( $(date +%s) - start )) s")
  echo "test.sh: $name took $(( $(date +%s) - start )) s"
}
# Up to 6 cases of one suite per test process (docs/building.md, "How the
# tests are registered"): each process pays LibTorch's start-up once.
phase build bash scripts/build.sh -DBAGUA_TEST_GROUP=6
phase suite ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 600
phase tsan bash scripts/tsan-test.sh
phase asan bash scripts/asan-test.sh
if ! wait "$prepare"; then cat "$prepare_log" >&2; echo "test.sh: preparing the Docker image failed" >&2; exit 1; fi
cat "$prepare_log"; rm -f "$prepare_log"
phase docker bash scripts/docker-test.sh
echo "test.sh: all passed; $(IFS=,; echo "${timings[*]}" | sed 's/,/, /g')"
