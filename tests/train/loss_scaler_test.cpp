// train.precision: fp16's loss scaling: the scaler alone on CPU tensors
// (train/loss_scaler.h), then real runs of `bagua run`: fp16 is refused on
// CPUs naming the key, and on a GPU (scripts/gpu-check.sh; CI has none) an
// overflow on one rank skips that step on every rank alike, halves the
// scale, and the run trains to within a margin of fp32.
#include "support/bagua_run.h"

#include "train/loss_scaler.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <limits>

namespace {

using namespace bagua::testing;
using bagua::train::LossScaler;
using Verdict = LossScaler::Verdict;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

NamedTensors with_grads(std::vector<float> grad) {
  at::Tensor p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(grad);
  return {{"w", p}};
}

TEST(LossScaler, UnscalesAFiniteStepExactlyAndScalesTheLoss) {
  LossScaler scaler({});
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.scaled(torch::tensor(2.0f)).item<float>(), 131072.0f);
  auto params = with_grads({65536.0f, -3.0f * 65536.0f, 0.5f * 65536.0f});
  EXPECT_EQ(scaler.after_backward(torch::tensor(1.0f), params), Verdict::kStep);
  const at::Tensor g = params[0].second.grad();
  EXPECT_EQ(g[0].item<float>(), 1.0f);
  EXPECT_EQ(g[1].item<float>(), -3.0f);
  EXPECT_EQ(g[2].item<float>(), 0.5f);
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.overflows(), 0);
}

TEST(LossScaler, AnOverflowSkipsHalvesTheScaleAndLeavesTheGradients) {
  LossScaler scaler({});
  auto params = with_grads({1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_EQ(scaler.after_backward(torch::tensor(1.0f), params), Verdict::kSkip);
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.overflows(), 1);
  EXPECT_EQ(params[0].second.grad()[0].item<float>(), 1.0f) << "a skipped step's gradients are not unscaled";
  auto nan = with_grads({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(scaler.after_backward(torch::tensor(1.0f), nan), Verdict::kSkip);
  EXPECT_EQ(scaler.scale(), 16384.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
}

TEST(LossScaler, ANonFiniteLossIsADivergenceNotAnOverflow) {
  LossScaler scaler({});
  auto params = with_grads({std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(scaler.after_backward(torch::tensor(std::numeric_limits<float>::quiet_NaN()), params),
            Verdict::kLossNotFinite);
  EXPECT_EQ(scaler.scale(), 65536.0) << "a divergence must not move the scale";
  EXPECT_EQ(scaler.overflows(), 0);
}

TEST(LossScaler, TheScaleGrowsAfterTheIntervalWithoutAnOverflowAndResumes) {
  LossScaler::Options o;
  o.growth_interval = 3;
  LossScaler scaler(o);
  for (int i = 0; i < 2; ++i) {
    auto p = with_grads({1.0f});
    EXPECT_EQ(scaler.after_backward(torch::tensor(1.0f), p), Verdict::kStep);
  }
  EXPECT_EQ(scaler.scale(), 65536.0);
  auto p = with_grads({1.0f});
  EXPECT_EQ(scaler.after_backward(torch::tensor(1.0f), p), Verdict::kStep);
  EXPECT_EQ(scaler.scale(), 131072.0);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
  auto q = with_grads({1.0f});
  scaler.after_backward(torch::tensor(1.0f), q);
  // A checkpoint's state, restored into a fresh scaler, goes on from there.
  LossScaler resumed(o);
  resumed.restore(scaler.state());
  EXPECT_EQ(resumed.scale(), 131072.0);
  EXPECT_EQ(resumed.state().growth_tracker, 1);
}

// fp16 is the GPU's: a recipe on CPUs is refused before any worker starts,
// naming the key.
TEST_F(RunTest, Fp16IsRefusedOnCpusNamingTheKey) {
  RunOutcome cpu = bagua_run(write_recipe("fp16cpu") + " --set train.device=cpu --set train.precision=fp16");
  EXPECT_EQ(cpu.exit_code, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("train.precision"), std::string::npos) << cpu.output;
  EXPECT_NE(cpu.output.find("fp16 runs on GPUs only and train.device is cpu"), std::string::npos) << cpu.output;
  // qadam folds the still-scaled gradients into its momentum: refused.
  RunOutcome qadam = bagua_run(write_recipe("fp16qadam") + " --set train.device=cuda --set train.precision=fp16"
                                                            " --set algorithm.name=qadam"
                                                            " --set 'optimizers=[{type: qadam, lr: 0.001}]'");
  EXPECT_EQ(qadam.exit_code, 2) << qadam.output;
  EXPECT_NE(qadam.output.find("qadam folds each gradient into its momentum during backward"), std::string::npos)
      << qadam.output;
  if (torch::cuda::is_available()) return;
  RunOutcome any = bagua_run(write_recipe("fp16auto") + " --set train.precision=fp16");
  EXPECT_EQ(any.exit_code, 2) << any.output;
  EXPECT_NE(any.output.find("train.precision: fp16 runs on GPUs only"), std::string::npos) << any.output;
  EXPECT_FALSE(fs::exists(dir_ / "fp16auto" / "metrics.jsonl"));
}

// GPU machines only: gradients that overflow on rank 1 at step 11 skip that
// step on both ranks (rank 0's records count it), the scale halves, the
// weights stay finite, and the checkpoint keeps the scale. gradient_allreduce
// finds the overflow in the averaged gradients; decentralized, whose
// gradients differ, agrees on it.
TEST_F(RunTest, Fp16OnTheGpuSkipsAnOverflowOnEveryRankAlike) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  for (const std::string algorithm : {"gradient_allreduce", "decentralized"}) {
    SCOPED_TRACE(algorithm);
    const std::string name = "fp16-" + algorithm;
    RunOutcome r = bagua_run(write_recipe(name) + " --set train.device=cuda --set train.precision=fp16"
                                                  " --set algorithm.name=" + algorithm,
                             "BAGUA_OVERFLOW_AT_STEP=1:10");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("fp16 autocast with dynamic loss scaling"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("fp16 gradients overflowed; step skipped, loss scale lowered to 32768"),
              std::string::npos) << r.output;
    double scale = -1;
    int64_t overflows = -1;
    for (const auto& j : metrics(dir_ / name / "metrics.jsonl")) {
      if (j.contains("loss_scale")) scale = j["loss_scale"];
      if (j.contains("overflow_skips")) overflows = j["overflow_skips"];
      if (j.contains("loss")) {
        EXPECT_TRUE(std::isfinite(j["loss"].get<double>())) << j.dump();
      }
    }
    EXPECT_EQ(scale, 32768.0);
    EXPECT_EQ(overflows, 1) << "rank 0 must skip rank 1's overflow too";
    for (const auto& p : model_parameters(dir_ / name / "model.pt")) EXPECT_TRUE(p.isfinite().all().item<bool>());
    const auto meta = nlohmann::json::parse(read_file(dir_ / name / "checkpoints" / "step-00000024" / "meta.json"));
    EXPECT_EQ(meta["loss_scale"]["scale"], 32768.0) << meta.dump();
  }
}

// GPU machines only: fp16 and bf16 train the quickstart to within 2 points
// of fp32's accuracy, one worker over NCCL.
TEST_F(RunTest, Fp16AndBf16OnTheGpuTrainToWithinAMarginOfFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible (or a CPU build of LibTorch)";
  const std::string mlp = kSource + "/recipes/fashion-mnist-mlp.yaml --nproc-per-node 1 --set train.device=cuda"
                                    " --set train.max_steps=300 --set train.eval_every=300";
  std::map<std::string, double> accuracy;
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    RunOutcome r = bagua_run(mlp + " --set train.precision=" + precision + " --set output.dir=" +
                             (dir_ / precision).string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    accuracy[precision] = final_accuracy(dir_ / precision / "metrics.jsonl");
  }
  EXPECT_GT(accuracy["fp32"], 0.7);
  EXPECT_NEAR(accuracy["bf16"], accuracy["fp32"], 0.02);
  EXPECT_NEAR(accuracy["fp16"], accuracy["fp32"], 0.02);
  EXPECT_GT(max_abs_diff(model_parameters(dir_ / "fp16" / "model.pt"), model_parameters(dir_ / "fp32" / "model.pt")),
            0.0)
      << "fp16 changed nothing: was autocast on?";
}

}  // namespace
