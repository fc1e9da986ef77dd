// Worker-side scenarios of the algorithm tests. Every rank trains with
// bagua and, in the same process, recomputes every rank's gradients on a
// reference copy of the model and applies the algorithm's math to them by
// hand (MinMaxUInt8 as the quantiser, tested on its own): the weights must
// come out bit for bit the same, and identical on every rank, after every
// step.
#include "algorithms/reference.h"
#include "support/worker_checks.h"

#include <bagua/algorithms/bytegrad.h>
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/algorithms/q_adam.h>
#include <bagua/communication.h>
#include <bagua/compression.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

using bagua::testing::WorkerChecks;
using bagua::testing::identical_across_ranks;

namespace {

using namespace bagua::testing::ref;

// Bagua's compressed average of `flats` (one per member, in rank order):
// chunk c of every member, decompressed, added in rank order in float32 and
// divided by n, compressed once more and decompressed.
at::Tensor compressed_average_reference(const std::vector<at::Tensor>& flats) {
  const int64_t n = static_cast<int64_t>(flats.size()), numel = flats[0].numel();
  const int64_t per = bagua::MinMaxUInt8::chunk_numel(numel, n);
  std::vector<at::Tensor> chunks_back(n);
  for (int64_t c = 0; c < n; ++c) {
    at::Tensor sum = torch::zeros({per});
    for (int64_t q = 0; q < n; ++q) {
      at::Tensor chunk = flats[q].narrow(0, c * per, per).contiguous();
      at::Tensor back = torch::empty({per});
      bagua::MinMaxUInt8::decompress(bagua::MinMaxUInt8::compress(chunk), back);
      sum.add_(back);
    }
    sum.div_(n);
    at::Tensor again = torch::empty({per});
    bagua::MinMaxUInt8::decompress(bagua::MinMaxUInt8::compress(sum), again);
    chunks_back[c] = again;
  }
  return torch::cat(chunks_back);
}

// Hierarchical: the mean within each node (local ranks added in order,
// divided by the node size), then the compressed average among the nodes.
at::Tensor low_precision_reference(const std::vector<at::Tensor>& flats, bool hierarchical, int local_size) {
  if (!hierarchical) return compressed_average_reference(flats);
  std::vector<at::Tensor> leaders;
  for (size_t first = 0; first < flats.size(); first += local_size) {
    at::Tensor sum = flats[first].clone();
    for (int k = 1; k < local_size; ++k) sum.add_(flats[first + k]);
    leaders.push_back(sum.div_(local_size));
  }
  return compressed_average_reference(leaders);
}

bool hierarchical_from_env() { return std::getenv("BAGUA_TEST_HIERARCHICAL") != nullptr; }

int scenario_bytegrad_exact() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const bool hierarchical = hierarchical_from_env();
  WorkerChecks c(rank);
  torch::manual_seed(1000 + rank);  // ranks start different: with_bagua aligns them
  Seq model = make_mlp();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  bagua::WithBaguaOptions options;
  options.bucket_bytes = 200;  // several buckets
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::ByteGrad>(hierarchical, true), options);
  c.expect(ddp->bagua_buckets().size() > 1, "several buckets");
  for (const auto& b : ddp->bagua_buckets()) {
    c.expect(b->padded_numel() % world == 0, "bucket " + b->name() + " aligned to the world size");
  }
  Seq ref(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::map<std::string, at::Tensor> ref_params;
  for (const auto& item : ref->named_parameters()) ref_params[item.key()] = item.value();

  for (int64_t step = 0; step < 5; ++step) {
    auto [x, y] = batch_of(step, world);
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
        .backward();
    ddp->step();

    auto grads = all_gradients(ref, step, world);
    for (const auto& bucket : ddp->bagua_buckets()) {
      std::vector<at::Tensor> flats;
      for (int q = 0; q < world; ++q) flats.push_back(bucket_flat(*bucket, grads[q]));
      at::Tensor avg = low_precision_reference(flats, hierarchical, bagua::get_local_size());
      int64_t offset = 0;
      for (const auto& t : bucket->tensors()) {
        at::Tensor p = ref_params.at(t.name);
        p.mutable_grad() = avg.narrow(0, offset, t.numel()).view(p.sizes()).clone();
        offset += t.numel();
      }
    }
    ref_opt.step();
    at::Tensor got = flat_params(*model), want = flat_params(*ref);
    c.expect(torch::equal(got, want), "bytegrad step " + std::to_string(step) + " equals the reference bit for bit " +
                                          "(max diff " + std::to_string((got - want).abs().max().item<double>()) + ")");
    c.expect(identical_across_ranks(got), "bytegrad step " + std::to_string(step) + ": identical on every rank");
  }
  c.expect(world == 1 ? ddp->bytes_sent() == 0 : ddp->bytes_sent() > 0,
           "bytegrad counted its bytes (none at world size 1: nothing leaves the process)");
  return c.finish();
}

// QAdam: during the warm-up, its steps are Adam's on averaged gradients (to
// a rounding: Gloo adds in its own order); from the switch on, each step is
// checked bit for bit against the reference applied to the state before it.
int scenario_qadam_exact() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const bool hierarchical = hierarchical_from_env();
  const int64_t warmup = 3;
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  WorkerChecks c(rank);
  torch::manual_seed(2000 + rank);
  Seq model = make_mlp();
  auto opt = std::make_shared<bagua::QAdamOptimizer>(model->parameters(),
                                                     bagua::QAdamOptions(lr).warmup_steps(warmup));
  bagua::WithBaguaOptions options;
  options.bucket_bytes = 200;
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::QAdamAlgorithm>(opt, hierarchical), options);
  Seq ref(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));

  for (int64_t step = 0; step < 8; ++step) {
    // The state before the step, the same on every rank.
    const int64_t t_before = opt->step_count();
    std::map<std::string, at::Tensor> p0, m0, v0;
    for (const auto& item : model->named_parameters()) {
      p0[item.key()] = item.value().detach().clone();
      if (t_before > 0) {
        m0[item.key()] = opt->state_of(item.value()).exp_avg().clone();
        v0[item.key()] = opt->state_of(item.value()).exp_avg_sq().clone();
      }
    }
    auto [x, y] = batch_of(step, world);
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x.narrow(0, rank * kBatch, kBatch)), y.narrow(0, rank * kBatch, kBatch))
        .backward();
    ddp->step();

    {
      torch::NoGradGuard no_grad;
      for (const auto& item : ref->named_parameters()) item.value().copy_(p0.at(item.key()));
    }
    auto grads = all_gradients(ref, step, world);
    const bool compressed = t_before >= warmup;
    std::map<std::string, at::Tensor> m_new;  // the momentum each parameter steps with
    if (compressed) {
      for (const auto& bucket : ddp->bagua_buckets()) {
        std::vector<at::Tensor> flats;
        for (int q = 0; q < world; ++q) {
          std::map<std::string, at::Tensor> mq;  // rank q's momentum before the average
          for (const auto& t : bucket->tensors()) {
            mq[t.name] = m0.at(t.name).clone().mul_(b1).add_(grads[q].at(t.name), 1 - b1);
          }
          flats.push_back(bucket_flat(*bucket, mq));
        }
        at::Tensor avg = low_precision_reference(flats, hierarchical, bagua::get_local_size());
        int64_t offset = 0;
        for (const auto& t : bucket->tensors()) {
          m_new[t.name] = avg.narrow(0, offset, t.numel()).view(p0.at(t.name).sizes()).clone();
          offset += t.numel();
        }
      }
    }
    bool exact = true;
    double worst = 0;
    for (const auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      const double t = static_cast<double>(t_before + 1);
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      at::Tensor m, v;
      if (compressed) {
        m = m_new.at(name);
        v = v0.at(name);  // frozen
      } else {
        at::Tensor g = grads[0].at(name).clone();
        for (int q = 1; q < world; ++q) g.add_(grads[q].at(name));
        g.div_(world);
        m = t_before > 0 ? m0.at(name).clone() : torch::zeros_like(g);
        v = t_before > 0 ? v0.at(name).clone() : torch::zeros_like(g);
        if (t_before + 1 < warmup) {
          m.mul_(b1).add_(g, 1 - b1);
          v.mul_(b2).addcmul_(g, g, 1 - b2);
        }
      }
      // From step warmup_steps on, the frozen v is protected by max(v, m^2).
      at::Tensor vv = t_before + 1 >= warmup ? at::maximum(m * m, v) : v;
      at::Tensor denom = (vv.sqrt() / std::sqrt(bc2)).add_(eps);
      at::Tensor want = p0.at(name).clone().addcdiv_(m, denom, -lr / bc1);
      at::Tensor got = item.value().detach();
      worst = std::max(worst, (got - want).abs().max().item<double>());
      exact = exact && torch::equal(got, want);
      if (compressed) exact = exact && torch::equal(opt->state_of(item.value()).exp_avg(), m);
    }
    const std::string what = "qadam step " + std::to_string(step) + (compressed ? " (compressed)" : " (warm-up)");
    if (compressed) {
      c.expect(exact, what + " equals the reference bit for bit (max diff " + std::to_string(worst) + ")");
    } else {
      c.expect(worst < 1e-6, what + " equals Adam on averaged gradients (max diff " + std::to_string(worst) + ")");
    }
    c.expect(identical_across_ranks(flat_params(*model)), what + ": identical on every rank");
  }
  c.expect(opt->step_count() == 8, "8 optimizer steps");
  return c.finish();
}

// During the warm-up QAdam is bitwise Adam + gradient_allreduce (Bagua's
// own test): two models, same start, same data, side by side.
int scenario_qadam_warmup_is_adam() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  const int64_t warmup = 6;
  torch::manual_seed(5);
  Seq a = make_mlp();
  Seq b = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(a->clone());
  auto qadam = std::make_shared<bagua::QAdamOptimizer>(a->parameters(), bagua::QAdamOptions(0.01).warmup_steps(warmup));
  auto adam = std::make_shared<torch::optim::Adam>(b->parameters(), torch::optim::AdamOptions(0.01));
  auto ddp_a = bagua::with_bagua(*a, {qadam}, std::make_shared<bagua::QAdamAlgorithm>(qadam, false));
  auto ddp_b = bagua::with_bagua(*b, {adam}, std::make_shared<bagua::GradientAllReduce>(false, true));
  for (int64_t step = 0; step + 1 < warmup; ++step) {
    auto [x, y] = batch_of(step, world);
    at::Tensor xs = x.narrow(0, rank * kBatch, kBatch), ys = y.narrow(0, rank * kBatch, kBatch);
    ddp_a->zero_grad();
    torch::mse_loss(ddp_a->forward(a, xs), ys).backward();
    ddp_a->step();
    ddp_b->zero_grad();
    torch::mse_loss(ddp_b->forward(b, xs), ys).backward();
    ddp_b->step();
    c.expect(torch::equal(flat_params(*a), flat_params(*b)),
             "warm-up step " + std::to_string(step) + ": QAdam == Adam + gradient_allreduce, bit for bit");
  }
  return c.finish();
}

// Non-finite gradients stop bytegrad with a clear error on the rank that
// would average them, instead of a NaN model.
int scenario_bytegrad_nan() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  torch::manual_seed(9);
  Seq model = make_mlp();
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::ByteGrad>(false, true));
  at::Tensor x = torch::randn({kBatch, kIn});
  if (rank == 1) x[0][0] = NAN;
  ddp->zero_grad();
  // Rank 1's NaN reaches every rank as NaN, alike, and the exchange ends on
  // every rank (no rank stops mid-protocol).
  torch::mse_loss(ddp->forward(model, x), torch::zeros({kBatch, kOut})).backward();
  for (const auto& p : model->parameters()) {
    c.expect(!p.grad().isfinite().all().item<bool>(), "every averaged gradient holds rank 1's NaN");
  }
  // The next step, finite everywhere, is an ordinary one: the ranks are in step.
  ddp->zero_grad();
  x = torch::randn({kBatch, kIn});
  torch::mse_loss(ddp->forward(model, x), torch::zeros({kBatch, kOut})).backward();
  for (const auto& p : model->parameters()) {
    c.expect(p.grad().isfinite().all().item<bool>(), "the next step's gradients are finite");
    c.expect(identical_across_ranks(p.grad()), "and the same on every rank");
  }
  return c.finish();
}

}  // namespace

int run_scenario(const std::string& name) {
  return bagua::testing::dispatch_scenario(name, {
      {"bytegrad_exact", scenario_bytegrad_exact},
      {"qadam_exact", scenario_qadam_exact},
      {"qadam_warmup_is_adam", scenario_qadam_warmup_is_adam},
      {"bytegrad_nan", scenario_bytegrad_nan},
      {"decentralized_exact", scenario_decentralized_exact},
      {"low_precision_decentralized_exact", scenario_low_precision_decentralized_exact},
      {"low_precision_decentralized_replicas", scenario_low_precision_decentralized_replicas},
      {"async_abort_resume", scenario_async_abort_resume},
      {"async_one_rank_finished", scenario_async_one_rank_finished},
      {"async_destroy_without_abort", scenario_async_destroy_without_abort},
  });
}
