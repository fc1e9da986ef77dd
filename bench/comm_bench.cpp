// Allreduce algorithm bandwidth through bagua's communication layer versus
// c10d's ProcessGroupGloo called directly, in the same run, same processes.
//
// Run as the workers of a launch (see docs/benchmarks.md):
//   build/cli/bagua launch --nproc-per-node 2 -- build/bench/comm_bench
// Rank 0 prints one row per message size (float32, 4 KiB .. 64 MiB):
// algorithm bandwidth (bytes / time per allreduce) of
//   bagua    bagua::allreduce on the default group (cross-rank argument check on)
//   bagua-nv the same on a group with the check off (what training hot paths use)
//   c10d     ProcessGroupGloo::allreduce on its own store and connections
// and the ratios against c10d. Each figure is the median of 5 rounds; the
// variants alternate within a round so they see the same machine load.
#include <bagua/communication.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of `op`, over `iters` calls after 2 warm-up calls.
double time_per_call(int iters, const std::function<void()>& op) {
  op();
  op();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) op();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();

  // The baseline: its own TCPStore (next port) and its own Gloo connections.
  c10d::TCPStoreOptions store_opts;
  store_opts.port = static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")) + 1);
  store_opts.isServer = rank == 0;
  store_opts.numWorkers = world;
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"), store_opts);
  auto gloo_opts = c10d::ProcessGroupGloo::Options::create();
  gloo_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>("baseline", store), rank, world, gloo_opts);

  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  auto unverified = bagua::new_group(all);
  unverified->set_verify_collectives(false);

  if (rank == 0) {
    std::printf("allreduce algorithm bandwidth, world size %d, float32, GB/s (1e9 bytes/s)\n", world);
    std::printf("%10s %10s %10s %10s %12s %12s\n", "size", "bagua", "bagua-nv", "c10d", "bagua/c10d",
                "bagua-nv/c10d");
  }
  const int rounds = 5;
  for (int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    const int64_t n = bytes / 4;
    const int iters = static_cast<int>(std::clamp<int64_t>((256 << 20) / bytes, 4, 200));
    at::Tensor a = at::zeros({n}), b = at::zeros({n}), c = at::zeros({n});  // zeros stay zeros
    std::vector<at::Tensor> c_vec{c};
    std::vector<double> t_bagua, t_nv, t_c10d;
    for (int round = 0; round < rounds; ++round) {
      t_bagua.push_back(time_per_call(iters, [&] { bagua::allreduce(a); }));
      t_nv.push_back(time_per_call(iters, [&] { bagua::allreduce(b, bagua::ReduceOp::SUM, unverified); }));
      t_c10d.push_back(time_per_call(iters, [&] { gloo->allreduce(c_vec)->wait(); }));
    }
    double gb_bagua = bytes / median(t_bagua) / 1e9, gb_nv = bytes / median(t_nv) / 1e9,
           gb_c10d = bytes / median(t_c10d) / 1e9;
    if (rank == 0) {
      std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                                            : std::to_string(bytes >> 10) + " KiB";
      std::printf("%10s %10.3f %10.3f %10.3f %12.2f %12.2f\n", size.c_str(), gb_bagua, gb_nv, gb_c10d,
                  gb_bagua / gb_c10d, gb_nv / gb_c10d);
      std::fflush(stdout);
    }
  }
  bagua::barrier();
  return 0;
}
