// The measuring side of `bagua bench`: what each worker process runs.
//
// run_bench_worker() joins the process group (torchrun's variables must be
// set), builds the model (a recipe's TorchScript model, or a synthetic MLP
// of about `params` parameters made in memory) and, per contender, a clone
// of it with its own optimizers and, for the algorithms, its own
// BaguaModule. The contenders are "local" (the same step without any
// communication: the compute reference) and each named algorithm. Every
// contender first takes `warmup` unmeasured steps; then `rounds` rounds
// follow, each running every contender for `steps` steps in turn (the order
// reversed on odd rounds), so slow drifts of the machine hit all alike.
// Between its rounds an algorithm's background work (async) is paused.
//
// Per contender and rank it records every measured step's seconds, the
// bytes the communication layer counted (ProcessGroup::bytes_sent()), the
// bytes this process's TCP sockets sent and received (the kernel's
// TCP_INFO counters: what really crossed the wire, store and control
// traffic included), and the losses. Rank 0 gathers every rank's figures
// and returns them as JSON (see docs/bench.md for the fields); the other
// ranks return null.
//
// With straggler_rank set, that rank sleeps (straggler_factor - 1) times its
// own median local step time inside every step (between forward and
// backward), as if its compute were that much slower.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct BenchSpec {
  // A recipe (model, data, optimizers, batch size, algorithm kwargs), with
  // `overrides` ("key=value") applied; empty: the synthetic model.
  std::string recipe;
  std::vector<std::string> overrides;
  // Algorithms to measure, registry names, in order.
  std::vector<std::string> algorithms;
  int64_t steps = 10;   // measured steps per contender and round
  int64_t warmup = 5;   // unmeasured steps per contender before the rounds
  int64_t rounds = 3;
  // Synthetic model only: about this many parameters, batch per worker.
  int64_t params = 10'000'000;
  int64_t batch_size = 32;
  int straggler_rank = -1;
  double straggler_factor = 1.0;
  // Rank 0 writes a progress line per contender and round to stderr; with
  // progress_tty, a bar redrawn in place on /dev/tty instead.
  bool progress_tty = false;

  nlohmann::json to_json() const;
  static BenchSpec from_json(const nlohmann::json& j);
};

// Runs the benchmark as one worker; rank 0 returns every rank's figures.
// Throws bagua::Error (an InvalidArgument-style message) for a spec or
// recipe it cannot run, CommError when a peer fails.
nlohmann::json run_bench_worker(const BenchSpec& spec);

// "25M", "1.5m", "300k", "2G", "12345": a count (powers of 1000). Throws
// InvalidArgument for anything else or for values outside [1, 1e11].
int64_t parse_count(const std::string& text);

// Bytes this process's TCP sockets have sent (acknowledged by the peer) and
// received so far, summed over its open sockets (Linux TCP_INFO). Sockets
// closed meanwhile drop out, so take differences over windows in which the
// connections stay open.
struct WireBytes {
  int64_t sent = 0;
  int64_t received = 0;
};
WireBytes tcp_bytes_of_this_process();

}  // namespace bagua
