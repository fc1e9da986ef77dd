#!/usr/bin/env bash
# Everything in bagua that needs a GPU, for a machine that has one (CI has
# none). Run it on a Linux machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc), a PyTorch 2.x wheel with CUDA in `python3` (or $BAGUA_PYTHON), the
# Debian packages of scripts/install-deps.sh (or the same libraries
# otherwise installed), and Fashion-MNIST in /usr/share/datasets/fashion-mnist:
#
#   bash scripts/gpu-check.sh [--all]
#
# 1. builds bagua against the wheel's LibTorch into build-cuda/
#    (scripts/build.sh --cuda);
# 2. runs the GPU tests: collectives on CUDA tensors (NCCL at world size 1,
#    several ranks sharing the GPU over Gloo), the MinMaxUInt8 kernel against
#    the CPU bitwise, and `bagua run` of the quickstart on the GPU (one worker
#    over NCCL, two sharing the GPU over Gloo) reaching 85%, and every other
#    algorithm through `bagua run` on the GPU (one and two workers); with
#    --all, the whole suite on the CUDA build;
# 3. runs the GPU benchmarks: MinMaxUInt8 against a device-to-device copy,
#    and one-GPU `bagua run` against a plain PyTorch loop.
#
# Every step's output goes to $BAGUA_GPU_REPORT (default gpu-report/); a
# failing step is reported and the others still run. Exit code: 0 when
# every step passed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
report=${BAGUA_GPU_REPORT:-gpu-report}
py=${BAGUA_PYTHON:-python3}
mkdir -p "$report"
failed=()

step() {  # step NAME COMMAND...: runs it, its output to the terminal and $report/NAME.log
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  if "$@" 2>&1 | tee "$report/$name.log"; then
    echo "== $name: ok ($((SECONDS - t0)) s)"
  else
    echo "== $name: FAILED ($((SECONDS - t0)) s); log in $report/$name.log"
    failed+=("$name")
  fi
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none); this script is for GPU machines" >&2
  exit 2
fi
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  echo "gpu-check: Fashion-MNIST is missing from /usr/share/datasets/fashion-mnist" >&2
  echo "  (Debian: apt-get install dataset-fashion-mnist; elsewhere copy the four .gz IDX files there)" >&2
  exit 2
fi
nvidia-smi -L | tee "$report/gpu.txt"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$report/gpu.txt"

step build env BAGUA_PYTHON="$py" bash scripts/build.sh --cuda
if [[ " ${failed[*]} " == *" build "* ]]; then
  echo "gpu-check: the CUDA build failed; see $report/build.log" >&2
  exit 1
fi
gpu_tests='CudaCollectives|Backend\.|MinMaxUInt8|OnTheGpu|DeviceCuda|CpuDeviceWithNccl'
step gpu-tests ctest --test-dir build-cuda -R "$gpu_tests" --output-on-failure -j 4 --timeout 600
if [ "${1:-}" = "--all" ]; then
  step all-tests ctest --test-dir build-cuda -E "$gpu_tests" --output-on-failure -j 8 --timeout 600
fi
step bench-compression build-cuda/bench/compression_bench cuda 1
step bench-compression-8chunks build-cuda/bench/compression_bench cuda 8
step bench-compression-cpu build-cuda/bench/compression_bench cpu 1
# BAGUA_GPU_BENCH_ARGS: extra flags for bench/gpu_vs_torch.py (e.g. "--repeats 5").
# shellcheck disable=SC2086
step bench-vs-pytorch env PYTHONUNBUFFERED=1 "$py" bench/gpu_vs_torch.py --bagua build-cuda/cli/bagua ${BAGUA_GPU_BENCH_ARGS:-}

if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: ${failed[*]} (logs in $report/)"
  exit 1
fi
echo "gpu-check: every step passed (logs in $report/)"
