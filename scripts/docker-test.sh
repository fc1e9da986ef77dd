#!/usr/bin/env bash
# Builds bagua's Docker image (the top-level Dockerfile) and tests it:
#   - it does not run as root;
#   - `bagua validate` accepts every shipped recipe;
#   - the quickstart (recipes/fashion-mnist-mlp.yaml) for one epoch with 2
#     workers reaches at least 80% eval accuracy, its output written into a
#     directory mounted from the host;
#   - `bagua bench` at a tiny size measures every algorithm;
#   - the image's size is printed.
# scripts/test.sh runs it last.
#
# The engine is docker when a Docker daemon answers, else podman (installed
# and configured by `install-deps.sh --docker`). The base image is
# debian:bookworm-slim; when it is not present and cannot be pulled (a
# machine that reaches Debian's mirror but no registry), one is made with
# debootstrap from the mirror apt is configured with, given the same apt
# sources, and tagged debian:bookworm-slim locally.
#
# With podman the build stage gets this machine's ccache (the one
# scripts/build.sh fills) at /ccache, and apt's downloaded packages through
# an overlay (the image's layers do not keep them), so objects and packages
# the host already has are not made again.
#
# `docker-test.sh --prepare` does only the slow parts that need neither the
# sources compiled nor the CPU much (the base image, the package stages:
# mostly downloads and unpacking); scripts/test.sh runs it in the
# background while the host compiles, and the full run reuses its layers.
#
# Environment: BAGUA_IMAGE (default bagua:test) names the image;
# BAGUA_DOCKER=docker|podman forces the engine.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${BAGUA_IMAGE:-bagua:test}
prepare=0
case "${1:-}" in
  "") ;;
  --prepare) prepare=1 ;;
  *) echo "usage: scripts/docker-test.sh [--prepare]" >&2; exit 2 ;;
esac
base=docker.io/library/debian:bookworm-slim

say() { echo "docker-test: $*"; }
fail() { echo "docker-test: FAILED: $*" >&2; exit 1; }

engine=${BAGUA_DOCKER:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker; else engine=podman; fi
fi
if [ "$engine" = podman ]; then bash scripts/install-deps.sh --docker; fi
command -v "$engine" >/dev/null 2>&1 || fail "$engine is not installed"
say "engine: $engine ($($engine --version))"

# --- the base image --------------------------------------------------------
apt_mirror() {
  local uri=""
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^https?:/){print $i; exit}}' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

make_base_with_debootstrap() {
  local root mirror
  command -v debootstrap >/dev/null 2>&1 || fail "no $base and no debootstrap to make one (install-deps.sh --docker)"
  mirror=$(apt_mirror)
  root=$(mktemp -d /tmp/bagua-rootfs.XXXXXX)
  say "no $base here and none could be pulled: making one with debootstrap from $mirror (a few minutes)"
  if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.log" 2>&1; then
    tail -20 "$root.log" >&2; rm -rf "$root" "$root.log"; fail "debootstrap failed"
  fi
  # The same apt sources as this machine (the official image has
  # bookworm, bookworm-updates and the security archive).
  rm -f "$root/etc/apt/sources.list"
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then cp /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/"; fi
  if [ -s /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$root/etc/apt/sources.list"; fi
  [ -n "$(ls "$root/etc/apt/sources.list.d/" 2>/dev/null)" ] || [ -s "$root/etc/apt/sources.list" ] \
    || echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | "$engine" import - "$base" >/dev/null
  rm -rf "$root" "$root.log"
}

if ! "$engine" image inspect "$base" >/dev/null 2>&1; then
  if ! timeout 60 "$engine" pull "$base" >/dev/null 2>&1; then make_base_with_debootstrap; fi
fi

# --- the build --------------------------------------------------------------
build_flags=(--pull=never)
if [ "$engine" = podman ]; then
  # podman build does not apply containers.conf's default_ulimits, and its
  # own defaults can exceed what this machine allows.
  limits=$(grep -oE '"(nofile|nproc)=[0-9]+:[0-9]+"' /etc/containers/containers.conf 2>/dev/null | tr -d '"' || true)
  for l in $limits; do build_flags+=(--ulimit "$l"); done
  if command -v ccache >/dev/null 2>&1; then
    cache_dir=$(ccache --get-config cache_dir)
    mkdir -p "$cache_dir"
    # The same source path as here, so the unity batches hash the same.
    build_flags+=(--volume "$cache_dir:/ccache" --build-arg "BAGUA_SRC=$PWD")
  fi
  [ -d /var/cache/apt/archives ] && build_flags+=(--volume /var/cache/apt/archives:/var/cache/apt/archives:O)
else
  build_flags=()
fi
if [ "$prepare" = 1 ]; then
  for target in build-deps runtime-deps; do
    start=$(date +%s)
    "$engine" build "${build_flags[@]}" --target "$target" -t "bagua-$target:prepared" . > "/tmp/bagua-docker-$target.log" 2>&1 \
      || { tail -40 "/tmp/bagua-docker-$target.log" >&2; fail "the $target stage did not build"; }
    say "stage $target built in $(( $(date +%s) - start )) s"
  done
  exit 0
fi

say "building $image"
start=$(date +%s)
"$engine" build "${build_flags[@]}" -t "$image" . > /tmp/bagua-docker-build.log 2>&1 \
  || { tail -40 /tmp/bagua-docker-build.log >&2; fail "the image did not build (log: /tmp/bagua-docker-build.log)"; }
grep -E "^(cache)?(hits|misses)|Hits|Misses" /tmp/bagua-docker-build.log | sed 's/^/docker-test: ccache in the build stage: /' || true
say "built in $(( $(date +%s) - start )) s"

run() { "$engine" run --rm "$@"; }

# --- the tests --------------------------------------------------------------
uid=$(run --entrypoint id "$image" -u)
[ "$uid" != 0 ] || fail "the image runs as root"
say "ok: runs as uid $uid, not root"

run --entrypoint bash "$image" -c 'set -e; bagua --version; cd /usr/local
  for f in lib/libbagua.so lib/libbagua_core.so lib/libbagua_common.so lib/libbagua_recipe.so \
           libexec/bagua/bagua-runtime include/bagua/communication.h include/bagua/data.h lib/cmake/bagua/baguaConfig.cmake \
           lib/cmake/bagua/baguaTargets.cmake share/bagua/schemas/recipe.schema.json share/bagua/recipes/models/mlp.pt; do
    test -s "$f" || { echo "missing /usr/local/$f"; exit 1; }
  done
  ! ldd bin/bagua libexec/bagua/bagua-runtime lib/libbagua_core.so | grep "not found"
  command -v redis-server ip >/dev/null' > /tmp/bagua-docker-files.log 2>&1 \
  || { cat /tmp/bagua-docker-files.log >&2; fail "the image lacks a file or a library"; }
say "ok: $(head -1 /tmp/bagua-docker-files.log); libraries, headers, CMake package, schema, recipes; every library found; redis-server and ip present"

run --entrypoint bash "$image" -c 'set -e; n=0; for r in /usr/local/share/bagua/recipes/*.yaml; do bagua validate "$r" >/dev/null; n=$((n+1)); done; echo "$n recipes"' \
  > /tmp/bagua-docker-validate.log 2>&1 || { cat /tmp/bagua-docker-validate.log >&2; fail "bagua validate refused a shipped recipe"; }
shipped=$(ls recipes/*.yaml | wc -l)
grep -qx "$shipped recipes" /tmp/bagua-docker-validate.log || fail "validated $(cat /tmp/bagua-docker-validate.log), expected $shipped recipes"
say "ok: bagua validate accepts all $shipped shipped recipes"

work=$(mktemp -d /tmp/bagua-docker-work.XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work"  # written by the image's non-root user
run -v "$work:/work" "$image" run /usr/local/share/bagua/recipes/fashion-mnist-mlp.yaml \
  --nproc-per-node 2 --set train.epochs=1 > "$work/run.log" 2>&1 \
  || { tail -30 "$work/run.log" >&2; fail "the quickstart failed in the image"; }
metrics=$work/runs/fashion-mnist-mlp/metrics.jsonl
[ -f "$metrics" ] || fail "no $metrics on the host after the run"
[ -f "$work/runs/fashion-mnist-mlp/model.pt" ] || fail "no model.pt on the host after the run"
accuracy=$(grep '"eval_accuracy"' "$metrics" | tail -1 | sed 's/.*"eval_accuracy": *\([0-9.eE+-]*\).*/\1/')
[ -n "$accuracy" ] || fail "no eval_accuracy in $metrics"
awk -v a="$accuracy" 'BEGIN{exit !(a >= 0.80)}' || fail "quickstart eval accuracy $accuracy < 0.80"
say "ok: the quickstart, 1 epoch on 2 workers: eval accuracy $accuracy (>= 0.80), output on the host"

run "$image" bench --params 50k --batch-size 8 --steps 2 --warmup 1 --rounds 1 > "$work/bench.log" 2>&1 \
  || { tail -30 "$work/bench.log" >&2; fail "bagua bench failed in the image"; }
for a in gradient_allreduce bytegrad decentralized low_precision_decentralized qadam async; do
  grep -q "$a" "$work/bench.log" || { cat "$work/bench.log" >&2; fail "bagua bench printed nothing for $a"; }
done
say "ok: bagua bench measured every algorithm"

size=$("$engine" image inspect --format '{{.Size}}' "$image")
say "image $image: $(( size / 1000000 )) MB"
say "all passed"
