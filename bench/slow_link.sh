#!/usr/bin/env bash
# Runs a benchmark over an emulated slow network: NODES network namespaces
# (default 2), one worker in each ("machines"), each joined by a veth pair
# to a bridge in a switch namespace; both ends of every pair are rate-limited
# with tc's token bucket filter, so every machine sends and receives at
# RATE. Needs root.
#
#   sudo bash bench/slow_link.sh [RATE] [NODES] [-- BENCH_COMMAND...]
#   sudo bash bench/slow_link.sh 2gbit                       # overlap_bench, 2 machines
#   sudo bash bench/slow_link.sh 500mbit -- build/bench/comm_bench
#   sudo bash bench/slow_link.sh 1gbit 4 -- build/bench/algorithms_bench --decentralized mlp1m
#
# RATE is a tc rate (default 2gbit). The namespaces, pairs and bridge are
# removed on exit. Addresses are 10.77.0.1, 10.77.0.2, ... inside the
# namespaces only.
set -euo pipefail
cd "$(dirname "$0")/.."
rate="2gbit"
nodes=2
if [ $# -gt 0 ] && [ "$1" != "--" ]; then rate="$1"; shift; fi
if [ $# -gt 0 ] && [ "$1" != "--" ]; then nodes="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(build/bench/overlap_bench)

sw=bagua-bench-sw
ns=()
for ((i = 0; i < nodes; ++i)); do ns+=("bagua-bench-n$i"); done
cleanup() {
  for n in "${ns[@]}" "$sw"; do ip netns del "$n" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
ip netns add "$sw"
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for ((i = 0; i < nodes; ++i)); do
  ip netns add "${ns[$i]}"
  ip link add "bagua-v$i" type veth peer name "bagua-b$i"
  ip link set "bagua-v$i" netns "${ns[$i]}"
  ip link set "bagua-b$i" netns "$sw"
  ip -n "$sw" link set "bagua-b$i" master br0
  ip -n "$sw" link set "bagua-b$i" up
  tc -n "$sw" qdisc add dev "bagua-b$i" root tbf rate "$rate" burst 1mb latency 100ms
  ip -n "${ns[$i]}" addr add "10.77.0.$((i + 1))/24" dev "bagua-v$i"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" link set "bagua-v$i" up
  tc -n "${ns[$i]}" qdisc add dev "bagua-v$i" root tbf rate "$rate" burst 1mb latency 100ms
done
port=29555
echo "link: veth to a bridge, tbf rate $rate each way; $nodes machines, one worker each" >&2
pids=()
for ((i = 0; i < nodes; ++i)); do
  ip netns exec "${ns[$i]}" env GLOO_SOCKET_IFNAME="bagua-v$i" OMP_NUM_THREADS=1 \
    build/cli/bagua launch --nnodes "$nodes" --node-rank "$i" --nproc-per-node 1 \
      --master-addr 10.77.0.1 --master-port "$port" --no-prefix --echo-rank 0 -- "${bench[@]}" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
exit $status
