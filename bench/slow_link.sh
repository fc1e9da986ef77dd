#!/usr/bin/env bash
# Runs a two-worker benchmark over an emulated slow link: two network
# namespaces joined by a veth pair whose both ends are rate-limited with tc's
# token bucket filter, one worker in each ("two machines"). Needs root.
#
#   sudo bash bench/slow_link.sh [RATE] [-- BENCH_COMMAND...]
#   sudo bash bench/slow_link.sh 2gbit                       # overlap_bench
#   sudo bash bench/slow_link.sh 500mbit -- build/bench/comm_bench
#
# RATE is a tc rate (default 2gbit). The namespaces and the veth pair are
# removed on exit. Addresses are 10.77.0.1 and 10.77.0.2, inside the
# namespaces only.
set -euo pipefail
cd "$(dirname "$0")/.."
rate="${1:-2gbit}"
shift || true
[ "${1:-}" = "--" ] && shift
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(build/bench/overlap_bench)

ns=(bagua-bench-n0 bagua-bench-n1)
cleanup() {
  for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
for n in "${ns[@]}"; do ip netns add "$n"; done
ip link add bagua-veth0 type veth peer name bagua-veth1
for i in 0 1; do
  ip link set "bagua-veth$i" netns "${ns[$i]}"
  ip -n "${ns[$i]}" addr add "10.77.0.$((i + 1))/24" dev "bagua-veth$i"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" link set "bagua-veth$i" up
  tc -n "${ns[$i]}" qdisc add dev "bagua-veth$i" root tbf rate "$rate" burst 1mb latency 100ms
done
port=29555
echo "link: veth, tbf rate $rate each way; one worker per namespace" >&2
pids=()
for i in 0 1; do
  ip netns exec "${ns[$i]}" env GLOO_SOCKET_IFNAME="bagua-veth$i" OMP_NUM_THREADS=1 \
    build/cli/bagua launch --nnodes 2 --node-rank "$i" --nproc-per-node 1 \
      --master-addr 10.77.0.1 --master-port "$port" --no-prefix --echo-rank 0 -- "${bench[@]}" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
