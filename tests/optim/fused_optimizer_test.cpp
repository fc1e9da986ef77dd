// fuse_optimizer: the weights after many steps are bitwise those of the
// same optimizer unfused, for every optimizer type and option that changes
// the update; state saved fused loads unfused and the other way round.
#include <bagua/errors.h>
#include <bagua/fused_optimizer.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <sstream>
#include <string>

namespace {

using OptimizerFactory = std::function<std::shared_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>;

// Parameters of awkward sizes (vector tails everywhere: in the buffer they
// start at odd offsets) and one large enough to be split across threads
// (40,000 values: LibTorch's grain is 32,768), with fixed random inputs for the loss.
struct Model {
  std::vector<at::Tensor> params, inputs;
  explicit Model(at::ScalarType second_dtype = at::kFloat) {
    torch::manual_seed(7);
    const std::vector<std::vector<int64_t>> shapes{{10}, {7, 13}, {33}, {1}, {64, 31}, {200, 200}, {5, 3, 2}, {17}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto dtype = i == 2 || i == 6 ? second_dtype : at::kFloat;
      params.push_back(torch::randn(shapes[i], torch::dtype(dtype)).requires_grad_());
      inputs.push_back(torch::randn(shapes[i], torch::dtype(dtype)));
    }
  }
  Model clone() const {
    Model m(*this);
    for (auto& p : m.params) p = p.detach().clone().requires_grad_();
    return m;
  }
  // A loss whose gradient depends on the weights.
  void backward() const {
    at::Tensor loss = torch::zeros({}, torch::kDouble);
    for (size_t i = 0; i < params.size(); ++i) {
      loss = loss + ((params[i] * inputs[i]).sin().sum() + params[i].square().sum() * 0.01).to(torch::kDouble);
    }
    loss.backward();
  }
};

void train(torch::optim::Optimizer& optimizer, const Model& model, int steps, int first_step = 0) {
  for (int s = first_step; s < first_step + steps; ++s) {
    for (auto& g : optimizer.param_groups()) g.options().set_lr(0.01 * (1.0 + 0.5 * std::sin(s)));  // a schedule
    optimizer.zero_grad();
    model.backward();
    optimizer.step();
  }
}

void expect_bitwise_equal(const Model& a, const Model& b, const std::string& what) {
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_TRUE(torch::equal(a.params[i], b.params[i]))
        << what << ": parameter " << i << " differs by up to "
        << (a.params[i] - b.params[i]).abs().max().item<double>();
  }
}

struct Case {
  std::string name;
  OptimizerFactory make;
};

std::vector<Case> cases() {
  using namespace torch::optim;
  auto make = [](auto build) -> OptimizerFactory { return build; };
  return {
      {"sgd", make([](auto p) { return std::make_shared<SGD>(p, SGDOptions(0.01)); })},
      {"sgd_momentum_dampening_weight_decay",
       make([](auto p) { return std::make_shared<SGD>(p, SGDOptions(0.01).momentum(0.9).dampening(0.1).weight_decay(1e-3)); })},
      {"sgd_nesterov_weight_decay",
       make([](auto p) { return std::make_shared<SGD>(p, SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-4)); })},
      {"adam", make([](auto p) { return std::make_shared<Adam>(p, AdamOptions(0.01)); })},
      {"adam_weight_decay_amsgrad",
       make([](auto p) { return std::make_shared<Adam>(p, AdamOptions(0.01).weight_decay(1e-3).amsgrad(true)); })},
      {"adamw", make([](auto p) { return std::make_shared<AdamW>(p, AdamWOptions(0.01).weight_decay(0.05)); })},
      {"adamw_amsgrad",
       make([](auto p) { return std::make_shared<AdamW>(p, AdamWOptions(0.01).weight_decay(0.05).amsgrad(true)); })},
      {"rmsprop", make([](auto p) { return std::make_shared<RMSprop>(p, RMSpropOptions(0.01)); })},
      {"rmsprop_centered_momentum_weight_decay",
       make([](auto p) {
         return std::make_shared<RMSprop>(p, RMSpropOptions(0.01).centered(true).momentum(0.9).weight_decay(1e-3));
       })},
      {"adagrad", make([](auto p) { return std::make_shared<Adagrad>(p, AdagradOptions(0.01)); })},
      {"adagrad_lr_decay_weight_decay_initial_accumulator",
       make([](auto p) {
         return std::make_shared<Adagrad>(
             p, AdagradOptions(0.01).lr_decay(1e-2).weight_decay(1e-3).initial_accumulator_value(0.1));
       })},
  };
}

class FusedEqualsUnfused : public ::testing::TestWithParam<Case> {};

TEST_P(FusedEqualsUnfused, BitwiseAfter50Steps) {
  Model plain, fused_model = plain.clone();
  auto unfused = GetParam().make(plain.params);
  auto fused = bagua::fuse_optimizer(GetParam().make(fused_model.params));
  ASSERT_EQ(fused->buffers().size(), 1u);
  EXPECT_TRUE(fused->buffers()[0].fused);
  train(*unfused, plain, 50);
  train(*fused, fused_model, 50);
  expect_bitwise_equal(plain, fused_model, GetParam().name);
}

// Checkpoints are per parameter both ways: fused -> unfused, unfused -> fused.
TEST_P(FusedEqualsUnfused, StateMovesBetweenFusedAndUnfusedBitwise) {
  Model reference, fused_model = reference.clone();
  auto straight = GetParam().make(reference.params);
  auto fused = bagua::fuse_optimizer(GetParam().make(fused_model.params));
  train(*straight, reference, 12);
  train(*fused, fused_model, 4);

  // Fused -> unfused at step 4.
  Model unfused_model = fused_model.clone();
  auto unfused = GetParam().make(unfused_model.params);
  std::stringstream fused_bytes;
  torch::save(*fused, fused_bytes);
  torch::load(*unfused, fused_bytes);
  train(*unfused, unfused_model, 4, 4);

  // Unfused -> fused at step 8.
  Model refused_model = unfused_model.clone();
  auto refused = bagua::fuse_optimizer(GetParam().make(refused_model.params));
  std::stringstream unfused_bytes;
  torch::save(*unfused, unfused_bytes);
  torch::load(*refused, unfused_bytes);
  EXPECT_TRUE(refused->buffers()[0].fused);
  train(*refused, refused_model, 4, 8);
  expect_bitwise_equal(reference, refused_model, GetParam().name + " through a save/load each way");
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedEqualsUnfused, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(FusedOptimizer, ParametersBecomeViewsIntoOneBufferPerDtype) {
  Model model(at::kDouble);
  auto fused = bagua::fuse_optimizer(std::make_shared<torch::optim::SGD>(model.params, 0.1));
  auto buffers = fused->buffers();
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_EQ(buffers[0].dtype, at::kFloat);
  EXPECT_EQ(buffers[0].parameters, 6u);
  EXPECT_EQ(buffers[1].dtype, at::kDouble);
  EXPECT_EQ(buffers[1].numel, 33 + 30);
  // Back to back in one storage, in order.
  const at::Tensor& a = model.params[0];
  const at::Tensor& b = model.params[1];
  EXPECT_TRUE(a.storage().is_alias_of(b.storage()));
  EXPECT_EQ(b.storage_offset(), a.storage_offset() + a.numel());
  model.backward();
  EXPECT_TRUE(a.grad().storage().is_alias_of(b.grad().storage())) << "autograd accumulated into the buffer";
}

TEST(FusedOptimizer, MixedDtypesAndGradientsSetToNoneStayBitwiseEqual) {
  Model plain(at::kDouble), fused_model = plain.clone();
  auto unfused = std::make_shared<torch::optim::Adam>(plain.params, torch::optim::AdamOptions(0.01));
  auto fused = bagua::fuse_optimizer(std::make_shared<torch::optim::Adam>(fused_model.params, 0.01));
  for (int s = 0; s < 10; ++s) {
    for (auto* m : {&plain, &fused_model}) {
      for (auto& p : m->params) p.mutable_grad().reset();  // zero_grad(set_to_none): autograd makes new ones
      m->backward();
    }
    unfused->step();
    fused->step();
  }
  expect_bitwise_equal(plain, fused_model, "adam, float and double, set_to_none");
}

TEST(FusedOptimizer, ABufferSizeCapSplitsBuffersAndChangesNoBit) {
  Model plain, fused_model = plain.clone();
  auto unfused = std::make_shared<torch::optim::AdamW>(plain.params, torch::optim::AdamWOptions(0.01));
  bagua::FuseOptions options;
  options.max_buffer_bytes = 4096;  // 1,024 floats: the large parameters get a buffer each
  auto fused = std::make_shared<bagua::FusedOptimizer>(
      std::make_shared<torch::optim::AdamW>(fused_model.params, torch::optim::AdamWOptions(0.01)), options);
  std::vector<size_t> per_buffer;
  for (const auto& b : fused->buffers()) per_buffer.push_back(b.parameters);
  EXPECT_EQ(per_buffer, (std::vector<size_t>{4, 1, 1, 2})) << "10+91+33+1 | 1,984 | 40,000 | 30+17 values";
  train(*unfused, plain, 10);
  train(*fused, fused_model, 10);
  expect_bitwise_equal(plain, fused_model, "adamw in capped buffers");
}

TEST(FusedOptimizer, ZeroGradFusedZeroesEveryGradient) {
  Model model;
  auto fused = bagua::fuse_optimizer(std::make_shared<torch::optim::SGD>(model.params, 0.1));
  model.backward();
  fused->zero_grad_fused();
  for (const auto& p : model.params) EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
}

TEST(FusedOptimizer, RefusesOptimizersItDoesNotKnow) {
  Model model;
  EXPECT_THROW(bagua::fuse_optimizer(std::make_shared<torch::optim::LBFGS>(model.params)), bagua::InvalidArgument);
  EXPECT_THROW(bagua::fuse_optimizer(nullptr), bagua::InvalidArgument);
}

TEST(FusedOptimizer, WithoutDoFlattenOnlyBackToBackParametersAreFused) {
  Model scattered;
  auto fused = bagua::fuse_optimizer(std::make_shared<torch::optim::SGD>(scattered.params, 0.1), /*do_flatten=*/false);
  EXPECT_FALSE(fused->buffers()[0].fused);
  at::Tensor storage = torch::zeros({30});
  std::vector<at::Tensor> views{storage.narrow(0, 0, 10).detach().requires_grad_(),
                                storage.narrow(0, 10, 20).view({4, 5}).detach().requires_grad_()};
  auto adopted = bagua::fuse_optimizer(std::make_shared<torch::optim::SGD>(views, 0.1), /*do_flatten=*/false);
  EXPECT_TRUE(adopted->buffers()[0].fused);
  EXPECT_EQ(views[1].storage_offset(), 10) << "left where it was";
}

}  // namespace
