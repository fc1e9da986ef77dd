#!/usr/bin/env bash
# Everything in bagua that needs a GPU, for a machine that has one (CI has
# none). Run it on a Linux machine with an NVIDIA GPU, the CUDA toolkit
# (nvcc), a PyTorch 2.x wheel with CUDA in `python3` (or $BAGUA_PYTHON), the
# Debian packages of scripts/install-deps.sh (or the same libraries
# otherwise installed), and Fashion-MNIST in /usr/share/datasets/fashion-mnist:
#
#   bash scripts/gpu-check.sh [--all] [--no-bench] [--bench-only]
#
# A GPU machine without Debian's packages (an Ubuntu image with a PyTorch
# wheel, say) can be given them as .deb files: `bash scripts/gpu-debs.sh DIR`
# downloads them on a Debian 12 machine; BAGUA_DEBS=DIR here unpacks them
# into a prefix (/tmp/bagua-debs) that the build, the tests and the
# benchmarks then use (headers, CMake configs, shared libraries, protoc,
# redis-server and Fashion-MNIST, copied to /usr/share/datasets when absent).
#
# 1. builds bagua against the wheel's LibTorch into build-cuda/
#    (scripts/build.sh --cuda);
# 2. runs the GPU tests: collectives on CUDA tensors (NCCL at world size 1,
#    several ranks sharing the GPU over Gloo), the MinMaxUInt8 kernel against
#    the CPU bitwise, and `bagua run` of the quickstart on the GPU (one worker
#    over NCCL, two sharing the GPU over Gloo) reaching 85%, and every other
#    algorithm through `bagua run` on the GPU (one and two workers); with
#    --all, the whole suite on the CUDA build;
#    (--bench-only skips steps 1-2: build-cuda/ must be built already);
# 3. runs the GPU benchmarks (--no-bench skips them): MinMaxUInt8 against a device-to-device copy,
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

if [ -n "${BAGUA_DEBS:-}" ]; then
  prefix=/tmp/bagua-debs
  mkdir -p "$prefix"
  for deb in "$BAGUA_DEBS"/*.deb; do dpkg-deb -x "$deb" "$prefix" || exit 2; done
  # Links that name an absolute path (zlib's libz.so -> /lib/...) point into the prefix.
  find "$prefix" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi
  done
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  # Debian keeps some headers under the multiarch directory (libjpeg's
  # jconfig.h, which sets JPEG_LIB_VERSION): the prefix's must win over the
  # machine's own /usr/include/x86_64-linux-gnu, or a libjpeg 8 header
  # (Ubuntu's) meets Debian's libjpeg 62 at run time ("Wrong JPEG library
  # version: library is 62, caller expects 80").
  export CPATH="$prefix/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if [ ! -d /usr/share/datasets/fashion-mnist ] && [ -d "$prefix/usr/share/datasets/fashion-mnist" ]; then
    mkdir -p /usr/share/datasets && cp -r "$prefix/usr/share/datasets/fashion-mnist" /usr/share/datasets/
  fi
fi
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

all=false bench=true build=true
for arg in "$@"; do
  case $arg in
    --all) all=true ;;
    --no-bench) bench=false ;;
    --bench-only) build=false ;;
    *) echo "gpu-check: unknown argument $arg (known: --all, --no-bench, --bench-only)" >&2; exit 2 ;;
  esac
done
# The tests' PyTorch references (samplers, TorchScript checks, torchrun)
# run with this machine's PyTorch, not Debian's /usr/bin/python3.
export BAGUA_TEST_PYTHON="${BAGUA_TEST_PYTHON:-$(command -v "$py")}"
if $build; then
step build env BAGUA_PYTHON="$py" bash scripts/build.sh --cuda
if [[ " ${failed[*]} " == *" build "* ]]; then
  echo "gpu-check: the CUDA build failed; see $report/build.log" >&2
  exit 1
fi
gpu_tests='CudaCollectives|Backend\.|MinMaxUInt8|OnTheGpu|DeviceCuda|CpuDeviceWithNccl'
step gpu-tests ctest --test-dir build-cuda -R "$gpu_tests" --output-on-failure -j 6 --timeout 600
if $all; then
  step all-tests ctest --test-dir build-cuda -E "$gpu_tests" --output-on-failure -j 8 --timeout 600
fi
fi
if $bench; then
step bench-compression build-cuda/bench/compression_bench cuda 1
step bench-compression-8chunks build-cuda/bench/compression_bench cuda 8
step bench-compression-cpu build-cuda/bench/compression_bench cpu 1
# BAGUA_GPU_BENCH_ARGS: extra flags for bench/gpu_vs_torch.py (e.g. "--repeats 5").
# shellcheck disable=SC2086
step bench-vs-pytorch env PYTHONUNBUFFERED=1 "$py" bench/gpu_vs_torch.py --bagua build-cuda/cli/bagua ${BAGUA_GPU_BENCH_ARGS:-}
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: ${failed[*]} (logs in $report/)"
  exit 1
fi
echo "gpu-check: every step passed (logs in $report/)"
