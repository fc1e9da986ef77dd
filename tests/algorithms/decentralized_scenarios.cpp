// Worker-side scenarios of the per-rank algorithms. Decentralized and
// low_precision_decentralized: every rank keeps a reference model of every
// rank, applies the algorithm's math to them by hand each step, and its own
// model must equal its reference bit for bit. Async: abort and resume in
// the awkward orders, bounded by the test's timeout.
#include "algorithms/reference.h"
#include "support/worker_checks.h"

#include <bagua/algorithms/async_model_average.h>
#include <bagua/algorithms/decentralized.h>
#include <bagua/communication.h>
#include <bagua/compression.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <sstream>
#include <cstdlib>
#include <string>
#include <thread>

using bagua::testing::WorkerChecks;
using namespace bagua::testing::ref;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// The model under `algorithm` in buckets of 200 bytes: several per model.
template <typename Optimizer>
std::shared_ptr<bagua::BaguaModule> with_small_buckets(Seq& model, const std::shared_ptr<Optimizer>& opt,
                                                       bagua::AlgorithmPtr algorithm) {
  bagua::WithBaguaOptions options;
  options.bucket_bytes = 200;
  return bagua::with_bagua(*model, {opt}, std::move(algorithm), options);
}

at::Tensor decompressed(const at::Tensor& packed, int64_t numel) {
  at::Tensor out = torch::empty({numel});
  bagua::MinMaxUInt8::decompress(packed, out);
  return out;
}

// The mean of `flats` as bagua's "all" computes it: zero-padded to a
// multiple of n, chunk c of every member stacked in rank order and summed,
// divided by n.
at::Tensor mean_all(const std::vector<at::Tensor>& flats) {
  const int64_t n = static_cast<int64_t>(flats.size()), numel = flats[0].numel();
  if (n == 1) return flats[0].clone();
  const int64_t per = (numel + n - 1) / n;
  std::vector<at::Tensor> padded;
  for (const auto& f : flats) padded.push_back(torch::cat({f, torch::zeros({n * per - numel})}));
  std::vector<at::Tensor> chunks;
  for (int64_t c = 0; c < n; ++c) {
    std::vector<at::Tensor> rows;
    for (const auto& p : padded) rows.push_back(p.narrow(0, c * per, per));
    chunks.push_back(torch::stack(rows).sum(0).div_(n));
  }
  return torch::cat(chunks).narrow(0, 0, numel);
}

// Each member's result of one decentralized exchange among `flats`.
std::vector<at::Tensor> exchange(const std::vector<at::Tensor>& flats, const std::string& mode, int64_t round) {
  const int n = static_cast<int>(flats.size());
  std::vector<at::Tensor> out(n);
  if (mode == "all") {
    at::Tensor mean = mean_all(flats);
    for (int q = 0; q < n; ++q) out[q] = mean.clone();
    return out;
  }
  for (int q = 0; q < n; ++q) {
    out[q] = flats[q].clone().add_(flats[bagua::shift_one_peer(q, n, round)]).div_(2);
  }
  return out;
}

// The optimizer of every worker and reference replica in these scenarios.
std::shared_ptr<torch::optim::SGD> sgd(Seq& m) {
  return std::make_shared<torch::optim::SGD>(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

}  // namespace

int scenario_decentralized_exact() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size(), local = bagua::get_local_size();
  const std::string mode = env_or("BAGUA_TEST_MODE", "all");
  const int64_t interval = std::stoll(env_or("BAGUA_TEST_INTERVAL", "1"));
  const bool hierarchical = std::getenv("BAGUA_TEST_HIERARCHICAL") != nullptr;
  WorkerChecks c(rank);
  torch::manual_seed(1000 + rank);
  Seq model = make_mlp();
  auto opt = sgd(model);
  auto ddp = with_small_buckets(model, opt, std::make_shared<bagua::Decentralized>(hierarchical, mode, interval));
  // One reference model (and optimizer) per rank, from the same start.
  std::vector<Seq> refs;
  std::vector<std::shared_ptr<torch::optim::SGD>> ref_opts;
  for (int q = 0; q < world; ++q) {
    refs.push_back(clone_of(model));
    ref_opts.push_back(sgd(refs.back()));
  }
  const std::string what = mode + "/interval " + std::to_string(interval) + (hierarchical ? "/hierarchical" : "");
  for (int64_t step = 0; step < 7; ++step) {
    auto [x, y] = batch_of(step, world);
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
        .backward();
    ddp->step();

    for (int q = 0; q < world; ++q) {  // gradients at each rank's own weights
      refs[q]->zero_grad();
      torch::mse_loss(refs[q]->forward(x.narrow(0, q * kBatch, kBatch)), y.narrow(0, q * kBatch, kBatch)).backward();
    }
    const int64_t counter = step + 1;
    if ((counter - 1) % interval == 0) {
      const int64_t round = (counter - 1) / interval;
      for (const auto& bucket : ddp->bagua_buckets()) {
        std::vector<at::Tensor> flats;
        for (int q = 0; q < world; ++q) flats.push_back(bucket_flat(*bucket, named_weights(refs[q])));
        std::vector<at::Tensor> result(world);
        if (!hierarchical) {
          result = exchange(flats, mode, round);
        } else {  // the mean within each node (2 members: a + b), then the nodes exchange
          std::vector<at::Tensor> nodes;
          for (int first = 0; first < world; first += local) {
            at::Tensor sum = flats[first].clone();
            for (int k = 1; k < local; ++k) sum.add_(flats[first + k]);
            nodes.push_back(sum.div_(local));
          }
          auto per_node = exchange(nodes, mode, round);
          for (int q = 0; q < world; ++q) result[q] = per_node[q / local];
        }
        for (int q = 0; q < world; ++q) write_bucket(*bucket, result[q], refs[q]);
      }
    }
    for (auto& o : ref_opts) o->step();
    at::Tensor got = flat_params(*model), want = flat_params(*refs[rank]);
    c.expect(torch::equal(got, want), what + " step " + std::to_string(step) + " equals the reference bit for bit " +
                                          "(max diff " + std::to_string((got - want).abs().max().item<double>()) + ")");
  }
  c.expect(world == 1 || ddp->bytes_sent() > 0, what + ": bytes counted");
  return c.finish();
}

int scenario_low_precision_decentralized_exact() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const int64_t interval = std::stoll(env_or("BAGUA_TEST_INTERVAL", "1"));
  WorkerChecks c(rank);
  torch::manual_seed(3000 + rank);
  Seq model = make_mlp();
  auto opt = sgd(model);
  auto ddp = with_small_buckets(model, opt, std::make_shared<bagua::LowPrecisionDecentralized>(false, interval));
  std::vector<Seq> refs;
  std::vector<std::shared_ptr<torch::optim::SGD>> ref_opts;
  for (int q = 0; q < world; ++q) {
    refs.push_back(clone_of(model));
    ref_opts.push_back(sgd(refs.back()));
  }
  // Per rank and bucket: w, L, R, all the initial weights.
  struct State {
    at::Tensor w, left, right;
  };
  std::vector<std::vector<State>> state(world);
  for (int q = 0; q < world; ++q) {
    for (const auto& bucket : ddp->bagua_buckets()) {
      at::Tensor x = bucket_flat(*bucket, named_weights(refs[q]));
      state[q].push_back({x.clone(), x.clone(), x.clone()});
    }
  }
  for (int64_t step = 0; step < 6; ++step) {
    auto [x, y] = batch_of(step, world);
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
        .backward();
    ddp->step();

    for (int q = 0; q < world; ++q) {
      refs[q]->zero_grad();
      torch::mse_loss(refs[q]->forward(x.narrow(0, q * kBatch, kBatch)), y.narrow(0, q * kBatch, kBatch)).backward();
      ref_opts[q]->step();
    }
    if (step % interval == 0) {
      const auto& buckets = ddp->bagua_buckets();
      for (size_t b = 0; b < buckets.size(); ++b) {
        std::vector<at::Tensor> packed(world);
        for (int q = 0; q < world; ++q) {
          State& st = state[q][b];
          at::Tensor d = bucket_flat(*buckets[b], named_weights(refs[q]));
          // Each product and sum rounded on its own (no fused multiply-add).
          d.add_(st.left.mul(1.0 / 3)).add_(st.right.mul(1.0 / 3)).add_(st.w.mul(-5.0 / 3));
          packed[q] = bagua::MinMaxUInt8::compress(d);
        }
        for (int q = 0; q < world; ++q) {
          State& st = state[q][b];
          const int64_t numel = st.w.numel();
          st.left.add_(decompressed(packed[(q - 1 + world) % world], numel));
          st.right.add_(decompressed(packed[(q + 1) % world], numel));
          at::Tensor next = st.w.clone().add_(decompressed(packed[q], numel));
          st.w.copy_(next);
          write_bucket(*buckets[b], next, refs[q]);
        }
      }
    }
    at::Tensor got = flat_params(*model), want = flat_params(*refs[rank]);
    c.expect(torch::equal(got, want), "low_precision_decentralized step " + std::to_string(step) +
                                          " equals the reference bit for bit (max diff " +
                                          std::to_string((got - want).abs().max().item<double>()) + ")");
  }
  return c.finish();
}

namespace {

std::map<std::string, at::Tensor> saved_state(const bagua::BaguaModule& ddp) {
  torch::serialize::OutputArchive out;
  ddp.save_algorithm_state(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  std::map<std::string, at::Tensor> state;
  for (const std::string& key : in.keys()) in.read(key, state[key]);
  return state;
}

}  // namespace

// The replicas low_precision_decentralized keeps of its neighbours: in a
// ring of two both neighbours are the one peer, so L and R stay equal (and
// are kept once); a checkpoint whose L and R differ parts them again, and
// training goes on from both.
int scenario_low_precision_decentralized_replicas() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  torch::manual_seed(3100 + rank);
  Seq model = make_mlp();
  auto opt = sgd(model);
  auto ddp = with_small_buckets(model, opt, std::make_shared<bagua::LowPrecisionDecentralized>(false, 1));
  auto steps = [&](int64_t from, int64_t to) {
    for (int64_t step = from; step < to; ++step) {
      auto [x, y] = batch_of(step, world);
      ddp->zero_grad();
      torch::mse_loss(ddp->forward(model, x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
          .backward();
      ddp->step();
    }
  };
  steps(0, 4);
  std::map<std::string, at::Tensor> state = saved_state(*ddp);
  c.expect(state.size() == 3 * ddp->bagua_buckets().size(), "w, left and right of every bucket saved");
  bool equal = true, moved = false;
  for (const auto& bucket : ddp->bagua_buckets()) {
    const std::string key = "lpd." + bucket->name() + ".";
    equal = equal && torch::equal(state.at(key + "left"), state.at(key + "right"));
    moved = moved || !torch::equal(state.at(key + "left"), state.at(key + "w"));
  }
  c.expect(moved, "the replicas moved");
  c.expect(equal == (world == 2), world == 2 ? "L and R equal in a ring of two" : "L and R apart in a larger ring");

  // Part L and R: R = L + 0.5, then load it back.
  torch::serialize::OutputArchive parted;
  for (auto& [key, t] : state) {
    const bool right = key.size() > 6 && key.compare(key.size() - 6, 6, ".right") == 0;
    parted.write(key, right ? state.at(key.substr(0, key.size() - 6) + ".left") + 0.5 : t);
  }
  std::stringstream bytes;
  parted.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  ddp->load_algorithm_state(in);
  std::map<std::string, at::Tensor> loaded = saved_state(*ddp);
  bool as_loaded = true;
  for (const auto& bucket : ddp->bagua_buckets()) {
    const std::string key = "lpd." + bucket->name() + ".";
    as_loaded = as_loaded && torch::equal(loaded.at(key + "left"), state.at(key + "left")) &&
                torch::equal(loaded.at(key + "right"), state.at(key + "left") + 0.5) &&
                torch::equal(loaded.at(key + "w"), state.at(key + "w"));
  }
  c.expect(as_loaded, "a checkpoint with L and R apart loads as it is");
  steps(4, 6);
  std::map<std::string, at::Tensor> after = saved_state(*ddp);
  bool apart = true;
  for (const auto& bucket : ddp->bagua_buckets()) {
    const std::string key = "lpd." + bucket->name() + ".";
    const at::Tensor gap = after.at(key + "right") - after.at(key + "left");
    apart = apart && gap.isfinite().all().item<bool>() &&
            (world != 2 || (gap - 0.5).abs().max().item<double>() < 1e-5);
  }
  c.expect(apart, "L and R, parted, train on (in a ring of two taking the same differences, 0.5 apart)");
  return c.finish();
}

namespace {

struct AsyncRun {
  Seq model = make_mlp();
  std::shared_ptr<torch::optim::SGD> opt;
  std::shared_ptr<bagua::AsyncModelAverage> algorithm;
  std::shared_ptr<bagua::BaguaModule> ddp;

  AsyncRun() {
    torch::manual_seed(4000 + bagua::get_rank());
    model = make_mlp();
    opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01));
    algorithm = std::make_shared<bagua::AsyncModelAverage>("all", /*sync_interval_ms=*/5, /*warmup_steps=*/2);
    ddp = bagua::with_bagua(*model, {opt}, algorithm);
  }
  void steps(int n, int sleep_ms = 2) {
    for (int i = 0; i < n; ++i) {
      auto [x, y] = batch_of(i, 1);
      ddp->zero_grad();
      torch::mse_loss(ddp->forward(model, x), y).backward();
      ddp->step();
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
  }
};

}  // namespace

// abort and resume repeated, in and out of order; the averaging runs (its
// bytes grow) while it should and stops when aborted.
int scenario_async_abort_resume() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  AsyncRun run;
  run.algorithm->resume(*run.ddp);  // during the warm-up: nothing to start
  run.steps(2);
  int64_t before = run.ddp->bytes_sent();
  run.steps(15);
  c.expect(run.ddp->bytes_sent() > before, "the background averaging sent weights");
  run.algorithm->abort(*run.ddp);
  run.algorithm->abort(*run.ddp);  // again: nothing left to stop
  before = run.ddp->bytes_sent();
  run.steps(5);
  c.expect(run.ddp->bytes_sent() == before, "nothing is sent while aborted");
  run.algorithm->resume(*run.ddp);
  run.algorithm->resume(*run.ddp);  // again: already running
  run.steps(10);
  c.expect(run.ddp->bytes_sent() > before, "averaging again after resume");
  run.algorithm->abort(*run.ddp);
  c.expect_throws<bagua::InvalidArgument>(
      [&] {
        Seq other = make_mlp();
        auto sgd = std::make_shared<torch::optim::SGD>(other->parameters(), torch::optim::SGDOptions(0.01));
        auto plain = bagua::with_bagua(*other, {sgd}, std::make_shared<bagua::Decentralized>(false));
        // Every rank has finished making plain's group before any of them
        // throws and tears its side down (else a slow rank still connecting
        // sees "connection closed by peer" instead of this check's error).
        bagua::barrier();
        run.algorithm->abort(*plain);
      },
      "not async", "abort of a module with another algorithm");
  return c.finish();
}

// Rank 1 stops early and aborts while rank 0 still trains: rank 1 waits in
// abort (its thread keeps averaging) until rank 0 aborts too.
int scenario_async_one_rank_finished() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  AsyncRun run;
  run.steps(rank == 1 ? 4 : 40, 3);
  auto t0 = std::chrono::steady_clock::now();
  run.algorithm->abort(*run.ddp);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.expect(true, "abort returned after " + std::to_string(waited) + " s");
  return c.finish();
}

// Destroying the module without abort stops the thread first.
int scenario_async_destroy_without_abort() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  {
    AsyncRun run;
    run.steps(12);
  }
  c.expect(true, "module destroyed with its averaging running");
  return c.finish();
}
