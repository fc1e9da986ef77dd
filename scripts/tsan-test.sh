#!/usr/bin/env bash
# Builds libbagua, the bagua command and the module, algorithm,
# communication and data tests with ThreadSanitizer into build-tsan/, and
# runs the tests whose code has threads of its own: the module's
# communication thread, the async algorithm's averaging thread,
# abort/resume, the thread that answers a checked irecv's offer, and the
# loader threads that decode batches ahead of the step. A data race or a lock-order
# inversion in bagua's code fails them (TSan's report, then exit 66).
# scripts/test.sh runs it after the main suite.
#
# LibTorch, Gloo and OpenMP are not instrumented: TSan sees their locks
# (pthread) but not their memory accesses, so races inside them are not
# reported, and one worker thread per process (OMP_NUM_THREADS=1, as the
# tests set) keeps OpenMP's barriers, which TSan cannot see, out of it.
#
# -O1 with line tables only (-g1), as the ASan build: TSan's reports keep
# their file:line stacks, and the build takes less than half the CPU time
# of -O2 -g (2 cores in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
if command -v ninja >/dev/null 2>&1 && [ ! -f build-tsan/CMakeCache.txt ]; then generator=(-G Ninja); fi
cmake -S . -B build-tsan "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBAGUA_BUILD_BENCH=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan -j "$(nproc)" --target bagua test_module test_algorithms test_comm test_data test_launch
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp ${TSAN_OPTIONS:-}"
ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" --timeout 600 \
  -R '^(Async\.|BaguaModule\.|CommThread\.|PointToPoint\.|Equivalence\.HierarchicalOnTwoSimulatedNodes|WorldSizes/Equivalence\..*world2|Cases/DecentralizedExactness\..*world2|QAdam\.|BatchLoader\.|ImageDecodeTest\.DecodesFromFourThreadsAtOnce|ElasticRounds\.)'
