// Worker-side scenarios of the BaguaModule / GradientAllReduce tests. Each
// rank trains with bagua and, in the same process, trains a plain LibTorch
// reference on the full batch (all ranks' samples); data-parallel training
// must match it.
#include "support/worker_checks.h"

#include "common/libtorch_compat.h"

#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

using bagua::testing::WorkerChecks;
using bagua::testing::identical_across_ranks;

namespace {

using Seq = torch::nn::Sequential;

Seq make_mlp(int64_t in, int64_t hidden, int64_t out, torch::Dtype dtype) {
  Seq m(torch::nn::Linear(in, hidden), torch::nn::Tanh(), torch::nn::Linear(hidden, hidden),
        torch::nn::Tanh(), torch::nn::Linear(hidden, out));
  m->to(dtype);
  return m;
}

at::Tensor flat_params(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}).to(torch::kDouble));
  return torch::cat(parts);
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind,
                                                        std::vector<at::Tensor> params) {
  if (kind == "sgd") {
    return std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  return std::make_shared<torch::optim::Adam>(params, torch::optim::AdamOptions(0.01));
}

constexpr int64_t kAuto = -1;

struct Config {
  std::string loss;  // "mse" | "ce"
  std::string optimizer;
  bool flatten;
  int64_t bucket_bytes;  // kAuto: bucket autotune, from 10 MiB
  bool hierarchical;
  torch::Dtype dtype;
  std::string describe() const {
    return loss + "/" + optimizer + "/flatten=" + std::to_string(flatten) + "/bucket=" +
           (bucket_bytes == kAuto ? std::string("auto") : std::to_string(bucket_bytes)) + "/hier=" + std::to_string(hierarchical) + "/" +
           (dtype == torch::kDouble ? "f64" : "f32");
  }
};

at::Tensor loss_of(const std::string& kind, const at::Tensor& out, const at::Tensor& y) {
  return kind == "mse" ? torch::mse_loss(out, y) : torch::cross_entropy_loss(out, y);
}

// K steps of bagua on this rank's slice vs a local reference on the full batch.
void check_equivalence(WorkerChecks& c, const Config& cfg) {
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const bool autotune = cfg.bucket_bytes == kAuto;
  // With autotune, enough steps to try every size (2 steps each) and train on.
  const int64_t B = 4, D = 6, O = 3, K = autotune ? 14 : 4;
  torch::manual_seed(1000 + rank);  // ranks start different: with_bagua must align them
  Seq model = make_mlp(D, 8, O, cfg.dtype);
  auto opt = make_optimizer(cfg.optimizer, model->parameters());
  bagua::WithBaguaOptions options;
  options.do_flatten = cfg.flatten;
  options.bucket_bytes = autotune ? int64_t{10} << 20 : cfg.bucket_bytes;
  options.autotune_buckets = autotune;
  options.autotune_steps_per_size = 2;
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>(cfg.hierarchical),
                               options);
  c.expect(identical_across_ranks(flat_params(*model)), cfg.describe() + ": identical after with_bagua");

  auto ref = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  auto ref_opt = make_optimizer(cfg.optimizer, ref->parameters());
  for (int64_t step = 0; step < K; ++step) {
    torch::manual_seed(77 + step);  // same data on every rank
    at::Tensor x = torch::randn({world * B, D}, cfg.dtype);
    at::Tensor y = cfg.loss == "mse" ? torch::randn({world * B, O}, cfg.dtype)
                                     : torch::randint(0, O, {world * B}, torch::kLong);
    ddp->zero_grad();
    at::Tensor mine = loss_of(cfg.loss, ddp->forward(model, x.narrow(0, rank * B, B)), y.narrow(0, rank * B, B));
    mine.backward();
    ddp->step();
    ref_opt->zero_grad();
    loss_of(cfg.loss, ref->forward(x), y).backward();
    ref_opt->step();
  }
  at::Tensor got = flat_params(*model), want = flat_params(*ref);
  bool close = torch::allclose(got, want, 1e-5, 1e-7);
  c.expect(close, cfg.describe() + ": N ranks x batch B == 1 rank x batch N*B (max abs diff " +
                      std::to_string((got - want).abs().max().item<double>()) + ")");
  c.expect(identical_across_ranks(got), cfg.describe() + ": bitwise identical across ranks after training");
  c.expect(ddp->bagua_train_step_counter() == K, cfg.describe() + ": step counter");
  if (world == 1) {
    // Alone, gradient_allreduce has nothing to do: no buckets, no traffic
    // (scenario_alone checks the rest).
    c.expect(ddp->bagua_buckets().empty(), cfg.describe() + ": a world of one makes no buckets");
    c.expect(ddp->bytes_sent() == 0, cfg.describe() + ": a world of one sends nothing");
    c.expect(!ddp->autotune_result().has_value(), cfg.describe() + ": nothing to tune alone");
  }
  if (autotune && world > 1) {
    // Tried several sizes, chose one of them (the same on every rank), and
    // the buckets are now the chosen size's.
    const auto& result = ddp->autotune_result();
    c.expect(result.has_value(), cfg.describe() + ": autotune chose within " + std::to_string(K) + " steps");
    if (result) {
      c.expect(result->trials.size() >= 2, cfg.describe() + ": autotune tried at least 2 sizes");
      bool listed = false;
      for (const auto& t : result->trials) {
        listed = listed || t.bucket_bytes == result->chosen_bucket_bytes;
        c.expect(t.step_seconds > 0, cfg.describe() + ": every size was timed");
        if (t.bucket_bytes == result->chosen_bucket_bytes) {
          c.expect(static_cast<int64_t>(ddp->bagua_buckets().size()) == t.buckets,
                   cfg.describe() + ": the buckets are the chosen size's");
        }
      }
      c.expect(listed, cfg.describe() + ": the chosen size is one that was tried");
      c.expect(ddp->options().bucket_bytes == result->chosen_bucket_bytes, cfg.describe() + ": kept");
      at::Tensor chosen = torch::tensor({static_cast<double>(result->chosen_bucket_bytes)}, torch::kDouble);
      c.expect(identical_across_ranks(chosen), cfg.describe() + ": every rank chose the same size");
    }
  }
  if (cfg.bucket_bytes == 1 && world > 1) {
    c.expect(ddp->bagua_buckets().size() == model->parameters().size(),
             cfg.describe() + ": one bucket per tensor");
  }
}

int scenario_equivalence() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  const bool hierarchical = std::getenv("BAGUA_TEST_HIERARCHICAL") != nullptr;
  for (std::string loss : {"mse", "ce"}) {
    for (std::string optimizer : {"sgd", "adam"}) {
      for (bool flatten : {true, false}) {
        for (int64_t bucket : {int64_t{10} << 20, int64_t{1}, int64_t{300}, kAuto}) {
          torch::Dtype dtype = optimizer == "adam" ? torch::kDouble : torch::kFloat;
          check_equivalence(c, {loss, optimizer, flatten, bucket, hierarchical, dtype});
        }
      }
    }
  }
  return c.finish();
}

// Ignored parameters never travel; everything else stays in sync.
int scenario_ignore() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  torch::manual_seed(5);
  Seq model(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
  auto opt = make_optimizer("sgd", model->parameters());
  bagua::WithBaguaOptions options;
  options.parameters_to_ignore = {"2.bias"};
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>(), options);
  bool listed = false;
  for (const auto& [name, p] : ddp->bagua_build_params()) listed = listed || name == "2.bias";
  c.expect(!listed, "bagua_build_params leaves out the ignored parameter");
  for (const auto& bucket : ddp->bagua_buckets()) {
    for (const auto& t : bucket->tensors()) c.expect(t.name != "2.bias", "no bucket holds 2.bias");
  }
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(100 * rank + step);  // different data per rank
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, torch::randn({6, 4})), torch::randn({6, 2})).backward();
    ddp->step();
  }
  auto named = model->named_parameters();
  if (world > 1) {
    c.expect(!identical_across_ranks(named["2.bias"].detach()), "ignored 2.bias differs across ranks");
  }
  for (const char* n : {"0.weight", "0.bias", "2.weight"}) {
    c.expect(identical_across_ranks(named[n].detach()), std::string(n) + " identical across ranks");
  }
  return c.finish();
}

// Parameters and optimizer state equal on every rank right after with_bagua,
// even when rank 0 has optimizer state and the others have none.
int scenario_initial_state() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  torch::manual_seed(rank);
  Seq model = make_mlp(3, 5, 2, torch::kFloat);
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                 torch::optim::SGDOptions(0.1 + rank).momentum(0.5));
  if (rank == 0) {  // momentum buffers exist on rank 0 only
    torch::mse_loss(model->forward(torch::randn({4, 3})), torch::randn({4, 2})).backward();
    sgd->step();
  }
  auto ddp = bagua::with_bagua(*model, {sgd}, std::make_shared<bagua::GradientAllReduce>());
  c.expect(identical_across_ranks(flat_params(*model)), "parameters equal after with_bagua");
  std::vector<at::Tensor> momenta;
  for (auto& p : model->parameters()) {
    auto key = bagua::compat::optimizer_state_key<std::decay_t<decltype(sgd->state())>>(p.unsafeGetTensorImpl());
    auto it = sgd->state().find(key);
    c.expect(it != sgd->state().end(), "momentum buffer present for every parameter");
    if (it == sgd->state().end()) return c.finish();
    momenta.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().reshape({-1}));
  }
  c.expect(identical_across_ranks(torch::cat(momenta)), "momentum buffers equal after with_bagua");
  return c.finish();
}

// Rank 2 builds a wider hidden layer: every rank is told, by with_bagua,
// that the models differ and which rank; rank 2 also hears the first
// tensor that differs. Nobody hangs in the broadcast of rank 0's weights.
int scenario_different_models() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  WorkerChecks c(rank);
  Seq model = make_mlp(3, rank == 2 ? 6 : 5, 2, torch::kFloat);
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  std::string message;
  try {
    bagua::with_bagua(*model, {sgd}, std::make_shared<bagua::GradientAllReduce>());
  } catch (const bagua::InvalidArgument& e) {
    message = e.what();
  }
  c.expect(message.find("the ranks wrap different models: rank 2 differs from rank 0") != std::string::npos,
           "every rank names the rank that differs: " + message);
  const bool detail = message.find("first difference: rank 0 has 'parameter 0.weight Float[5, 3]', this rank (2) "
                                   "has 'parameter 0.weight Float[6, 3]'") != std::string::npos;
  c.expect(detail == (rank == 2), "the differing rank, and it alone, names the first tensor that differs: " + message);
  return c.finish();
}

struct WithUnused : torch::nn::Module {
  WithUnused() {
    used = register_module("used", torch::nn::Linear(3, 2));
    unused = register_module("unused", torch::nn::Linear(3, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return used->forward(x); }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};

// A parameter without a gradient fails the step with its name, no hang.
int scenario_unused() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  auto model = std::make_shared<WithUnused>();
  auto opt = make_optimizer("sgd", model->parameters());
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>());
  c.expect_throws<bagua::Error>(
      [&] { torch::mse_loss(ddp->forward(model, torch::randn({2, 3})), torch::zeros({2, 2})).backward(); },
      "unused.weight", "unused parameter is named");
  return c.finish();
}

// The first bucket's allreduce starts while backward is still computing
// gradients; with overlap off, it starts only after the last one.
int scenario_overlap() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  for (bool overlap : {true, false}) {
    torch::manual_seed(3);
    Seq model;
    for (int i = 0; i < 6; ++i) {
      model->push_back(torch::nn::Linear(512, 512));
      model->push_back(torch::nn::Tanh());
    }
    auto opt = make_optimizer("sgd", model->parameters());
    bagua::WithBaguaOptions options;
    options.bucket_bytes = 1 << 20;  // one weight matrix per bucket
    options.overlap = overlap;
    auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>(), options);
    std::mutex mutex;
    std::vector<bagua::TraceEvent> events;
    ddp->set_trace([&](const bagua::TraceEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      events.push_back(e);
    });
    ddp->zero_grad();
    ddp->forward(model, torch::randn({512, 512})).pow(2).mean().backward();
    int64_t first_comm = -1, last_grad = -1;
    for (const auto& e : events) {
      if (e.kind == bagua::TraceEvent::kBucketCommStart && first_comm < 0) first_comm = e.sequence;
      if (e.kind == bagua::TraceEvent::kGradientReady) last_grad = e.sequence;
    }
    std::string what = std::string("overlap=") + (overlap ? "on" : "off") + ": first bucket comm at event " +
                       std::to_string(first_comm) + ", last gradient at event " + std::to_string(last_grad);
    std::cout << what << std::endl;
    c.expect(first_comm >= 0 && last_grad >= 0, what + ": both traced");
    c.expect(overlap ? first_comm < last_grad : first_comm > last_grad, what);
  }
  return c.finish();
}

// Switching algorithms replaces hooks and buckets: averaging -> summing
// gives world x the averaged gradient, never both reductions at once.
int scenario_switch() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  torch::manual_seed(9);
  Seq model = make_mlp(4, 6, 2, torch::kDouble);
  auto opt = make_optimizer("sgd", model->parameters());
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>());
  auto grads_for = [&](const at::Tensor& x, const at::Tensor& y) {
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x.narrow(0, 3 * rank, 3)), y.narrow(0, 3 * rank, 3)).backward();
    std::vector<at::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().reshape({-1}).clone());
    return torch::cat(g);
  };
  torch::manual_seed(1);
  at::Tensor x = torch::randn({3 * world, 4}, torch::kDouble), y = torch::randn({3 * world, 2}, torch::kDouble);
  at::Tensor averaged = grads_for(x, y);
  ddp->switch_algorithm(std::make_shared<bagua::GradientAllReduce>(false, /*average=*/false));
  c.expect(ddp->bagua_algorithm().kwargs()["average"] == false, "the new algorithm is in place");
  at::Tensor summed = grads_for(x, y);
  c.expect(torch::allclose(summed, averaged * world, 1e-10, 1e-12), "after the switch gradients are summed once");
  return c.finish();
}

// The threads of this process (/proc/self/task).
int64_t thread_count() {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// A world of one under gradient_allreduce does nothing a plain loop does
// not: no buckets, no copy of a gradient, nothing sent, no communication
// thread; the weights are bitwise those of the plain loop.
int scenario_alone() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  c.expect(bagua::get_world_size() == 1, "this scenario runs alone");
  torch::manual_seed(3);
  Seq model = make_mlp(6, 8, 3, torch::kFloat);
  auto ref = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
  auto ref_opt = make_optimizer("sgd", ref->parameters());
  ref_opt->zero_grad();
  ref->forward(torch::randn({4, 6})).sum().backward();  // autograd's and ATen's threads, if any, start here
  ref_opt->zero_grad();
  const int64_t threads_before = thread_count();
  auto opt = make_optimizer("sgd", model->parameters());
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>());
  c.expect(ddp->bagua_buckets().empty(), "no buckets");
  for (int step = 0; step < 5; ++step) {
    torch::manual_seed(50 + step);
    at::Tensor x = torch::randn({4, 6}), y = torch::randn({4, 3});
    ddp->zero_grad();
    torch::mse_loss(ddp->forward(model, x), y).backward();
    ddp->step();
    ref_opt->zero_grad();
    torch::mse_loss(ref->forward(x), y).backward();
    ref_opt->step();
  }
  c.expect(torch::equal(flat_params(*model), flat_params(*ref)), "bitwise the plain loop's weights");
  c.expect(ddp->bytes_sent() == 0, "nothing sent");
  c.expect(thread_count() == threads_before,
           "no thread started (" + std::to_string(threads_before) + " before, " + std::to_string(thread_count()) +
               " after)");
  return c.finish();
}

// A layer that backward skips after the first step: zero_grad() set its
// gradient to none, backward left it undefined, and step() gives it a
// zero gradient back, so SGD's momentum and weight decay still move it as
// in a plain loop whose zero_grad() zeroes in place (LibTorch 1.13's, and
// the semantics bagua keeps). Without that fill, SGD would skip the layer.
int scenario_skipped_layer() {
  bagua::init_process_group();
  WorkerChecks c(bagua::get_rank());
  torch::manual_seed(5);
  Seq model(torch::nn::Linear(6, 4), torch::nn::Tanh(), torch::nn::Linear(4, 3));
  Seq ref(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01);
  auto opt = std::make_shared<torch::optim::SGD>(model->parameters(), sgd);
  torch::optim::SGD ref_opt(ref->parameters(), sgd);
  auto ddp = bagua::with_bagua(*model, {opt}, std::make_shared<bagua::GradientAllReduce>());
  // The loss: through both layers at step 0, through the first alone after.
  auto loss = [](Seq& m, const at::Tensor& x, int step) {
    at::Tensor h = m[1]->as<torch::nn::Tanh>()->forward(m[0]->as<torch::nn::Linear>()->forward(x));
    return step == 0 ? m[2]->as<torch::nn::Linear>()->forward(h).pow(2).sum() : h.pow(2).sum();
  };
  at::Tensor last_after_step0;
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(70 + step);
    const at::Tensor x = torch::randn({5, 6});
    ddp->zero_grad();
    ddp->pre_forward();
    loss(model, x, step).backward();
    ddp->step();
    for (auto& p : ref->parameters()) {
      if (p.grad().defined()) p.mutable_grad().zero_();  // in place, whatever the LibTorch version's default
    }
    loss(ref, x, step).backward();
    ref_opt.step();
    if (step == 0) last_after_step0 = model[2]->as<torch::nn::Linear>()->weight.detach().clone();
  }
  c.expect(!torch::equal(model[2]->as<torch::nn::Linear>()->weight, last_after_step0),
           "the skipped layer still moved (momentum, weight decay)");
  c.expect(torch::equal(flat_params(*model), flat_params(*ref)), "bitwise the plain loop's weights");
  return c.finish();
}

}  // namespace

int run_scenario(const std::string& name) {
  return bagua::testing::dispatch_scenario(name, {
      {"equivalence", scenario_equivalence}, {"ignore", scenario_ignore},
      {"initial_state", scenario_initial_state}, {"unused", scenario_unused},
      {"overlap", scenario_overlap},         {"switch", scenario_switch},
      {"alone", scenario_alone},             {"skipped_layer", scenario_skipped_layer},
      {"different_models", scenario_different_models},
  });
}
