#!/usr/bin/env bash
# Installs the Debian packages bagua needs. Idempotent: packages already
# installed are skipped, and when nothing is missing it does no network work.
# The one place dependencies are listed: the README's commands, CI and the
# Dockerfile all call it.
#
# Usage (as root, or with sudo available):
#   scripts/install-deps.sh            everything to build, test, benchmark
#                                      and run the quickstart (the default)
#   scripts/install-deps.sh --build    only what compiling libbagua and the
#                                      bagua command needs (the Dockerfile's
#                                      build stage)
#   scripts/install-deps.sh --runtime  only what running bagua needs: shared
#                                      libraries, redis-server, iproute2, the
#                                      Fashion-MNIST data (the image's
#                                      runtime stage)
#   scripts/install-deps.sh --docker   podman and debootstrap, configured to
#                                      build and run images on a plain Debian
#                                      VM or container (scripts/docker-test.sh)
set -euo pipefail

build_packages=(
  build-essential cmake ninja-build pkg-config
  ccache                # compiler cache: scripts/build.sh and the image build share it
  libtorch-dev          # LibTorch 1.13 (CPU): tensors, autograd, TorchScript, c10d
  libgloo-dev           # headers that c10d's ProcessGroupGloo.hpp includes
  libyaml-cpp-dev       # recipe parsing
  libcli11-dev          # command line
  nlohmann-json3-dev    # JSON trees (recipes, metrics)
  libvalijson-dev       # JSON Schema validation of recipes
  zlib1g-dev            # gzipped IDX data sets (zlib inflate)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (Event protos, engine/src/train/tensorboard_event.proto)
  libhiredis-dev        # Redis client (dataset cache)
  python3 dataset-fashion-mnist  # the build makes the example recipes' token corpus and image folder (scripts/make_*.py)
  libjpeg62-turbo-dev   # JPEG decoding (image_folder data sets)
  libpng-dev            # PNG decoding (image_folder data sets)
)
runtime_packages=(
  libtorch1.13 libgloo0 libyaml-cpp0.7 libhiredis0.14 libprotobuf32 zlib1g
  libjpeg62-turbo libpng16-16  # JPEG and PNG decoding (image_folder data sets)
  libopenblas0-openmp   # a fast BLAS for LibTorch (the default libblas3 is the slow reference one); honours OMP_NUM_THREADS
  redis-server          # Redis server (spawned by the cache and its tests)
  iproute2 procps       # ip/tc (bagua bench --link, multi-node tests), ps
  dataset-fashion-mnist # the real data set the quickstart and tests use
)
test_packages=(
  libgtest-dev libgmock-dev
  libbenchmark-dev
  python3-torch         # exports TorchScript test models; PyTorch DDP baseline
  python3-protobuf      # tests read the event files back independently (tests/fixtures/read_tfevents.py)
)
docker_packages=(podman runc debootstrap uidmap)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${runtime_packages[@]}" "${test_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  --runtime) packages=("${runtime_packages[@]}") ;;
  --docker) packages=("${docker_packages[@]}") ;;
  *) echo "install-deps: unknown option '$1' (expected --build, --runtime or --docker)" >&2; exit 2 ;;
esac

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Podman on a plain Debian 12 VM or container (no systemd, cgroup v1 or a
# delegated v2): the cgroupfs manager, events to a file instead of journald,
# runc, and per-container ulimits within this machine's hard limits (the
# default asks for more than many containers may grant, and fails).
configure_podman() {
  local conf=/etc/containers/containers.conf
  if [ -f "$conf" ] && grep -q "written by bagua's install-deps" "$conf"; then return; fi
  if [ -f "$conf" ] && grep -q '^[^#]' "$conf"; then
    echo "install-deps: $conf already has settings; leaving it alone" >&2
    return
  fi
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=65536
  [ "$nproc" = unlimited ] && nproc=65536
  [ "$nofile" -gt 65536 ] && nofile=65536
  [ "$nproc" -gt 65536 ] && nproc=65536
  # Some kernels refuse an nproc limit above pid_max.
  local pid_max; pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 65536)
  [ "$nproc" -gt "$pid_max" ] && nproc=$pid_max
  $SUDO mkdir -p /etc/containers
  $SUDO tee "$conf" >/dev/null <<EOF
# written by bagua's install-deps.sh --docker
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi
if [ "${1:-}" = --docker ]; then configure_podman; fi
