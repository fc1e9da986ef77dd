#!/usr/bin/env bash
# How long `bagua validate` takes per recipe, against the same validation
# with LibTorch loaded, measured side by side in one invocation:
#
#   bash bench/validate_speed.sh [BUILD_DIR] [ROUNDS]
#
# `bagua` (BUILD_DIR/cli/bagua) links no LibTorch; `bagua-runtime validate`
# (BUILD_DIR/cli/bagua-runtime) runs the same code from the executable of
# the commands that train, which loads LibTorch (~290 shared libraries) as
# every bagua command did before they were split. Each round validates every
# shipped recipe (recipes/*.yaml) once with each, alternating; the figure is
# the median over rounds of the milliseconds per recipe, and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
front=$build/cli/bagua
runtime=$build/cli/bagua-runtime
for exe in "$front" "$runtime"; do
  [ -x "$exe" ] || { echo "validate_speed: $exe is not built (bash scripts/build.sh)" >&2; exit 2; }
done
recipes=(recipes/*.yaml)
ms_per_recipe() {  # EXE...: milliseconds per recipe for one pass over all of them
  local start end
  start=$(date +%s%N)
  for r in "${recipes[@]}"; do "$@" validate "$r" > /dev/null 2>&1 || { echo "validate failed: $* $r" >&2; exit 1; }; done
  end=$(date +%s%N)
  echo $(( (end - start) / 1000 / ${#recipes[@]} ))  # microseconds
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
fast=() slow=()
for ((i = 0; i < rounds; ++i)); do
  fast+=("$(ms_per_recipe "$front")")
  slow+=("$(ms_per_recipe "$runtime")")
done
f=$(printf '%s\n' "${fast[@]}" | median)
s=$(printf '%s\n' "${slow[@]}" | median)
echo "bagua validate, ${#recipes[@]} shipped recipes, median of $rounds rounds:"
awk -v f="$f" -v s="$s" 'BEGIN {
  printf "  bagua (no LibTorch)        %8.1f ms per recipe\n", f / 1000
  printf "  bagua-runtime (LibTorch)   %8.1f ms per recipe\n", s / 1000
  printf "  speed-up                   %8.1fx\n", s / f
}'
