#!/usr/bin/env bash
# Downloads, on a Debian 12 machine, the Debian packages a CUDA build and
# scripts/gpu-check.sh need, as .deb files into DIR, for a GPU machine that
# has a PyTorch wheel and the CUDA toolkit but not these libraries (nothing
# is installed here):
#
#   bash scripts/gpu-debs.sh DIR
#   # then, on the GPU machine, with DIR copied beside the checkout:
#   BAGUA_DEBS=DIR bash scripts/gpu-check.sh
#
# The list is scripts/install-deps.sh's build and test libraries (LibTorch
# and python3-torch excepted: the wheel provides them), with the runtime
# libraries their -dev packages point at, redis-server for the cache tests,
# libjpeg-turbo and libpng for image folders, and Fashion-MNIST (about 31 MB
# of the 39 MB).
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: scripts/gpu-debs.sh DIR" >&2
  exit 2
fi
mkdir -p "$1"
cd "$1"
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libcli11-dev nlohmann-json3-dev libvalijson-dev libhiredis-dev \
  libhiredis0.14 libgloo-dev libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian libprotobuf-dev \
  libprotobuf32 protobuf-compiler libprotoc32 zlib1g zlib1g-dev redis-server redis-tools libjemalloc2 liblzf1 \
  libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16 dataset-fashion-mnist
ls -l
