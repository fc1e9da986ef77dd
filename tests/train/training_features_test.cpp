// train.grad_accum_steps, train.clip_grad_norm and train.precision, with
// real runs of `bagua run`: accumulation equals one large batch for every
// synchronous algorithm and sends nothing more; a signal during
// accumulation stops at a step boundary and the resume ends where an
// uninterrupted run does; the logged grad_norm and the clipped step equal
// PyTorch's on the same samples; bf16 trains to within a stated margin of
// fp32.
#include "support/python.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <csignal>
#include <sys/wait.h>
#include <thread>

namespace {

using namespace bagua::testing;

std::vector<nlohmann::json> step_records(const fs::path& file) {
  std::vector<nlohmann::json> out;
  for (const auto& j : metrics(file))
    if (j.contains("loss") && !j.contains("eval_loss")) out.push_back(j);
  return out;
}

// N = 4 micro-batches of 16 against one batch of 64 on the same samples:
// the sampler hands a worker 64 samples a step either way.
TEST_F(RunTest, FourMicroBatchesEqualOneBatchOfTheirSamplesForEverySynchronousAlgorithm) {
  for (const std::string algorithm :
       {"gradient_allreduce", "bytegrad", "qadam", "decentralized", "low_precision_decentralized"}) {
    SCOPED_TRACE(algorithm);
    std::string sets = " --set algorithm.name=" + algorithm + " --set train.max_steps=50 --set train.log_every_steps=10";
    if (algorithm == "qadam") sets += " --set 'optimizers=[{type: qadam, lr: 0.002, warmup_steps: 20}]'";
    RunOutcome one = bagua_run(write_recipe(algorithm + "-one") + sets + " --set data.batch_size=64");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    RunOutcome four = bagua_run(write_recipe(algorithm + "-four") + sets + " --set train.grad_accum_steps=4");
    ASSERT_EQ(four.exit_code, 0) << four.output;
    EXPECT_NE(four.output.find("4 micro-batches of 16 per worker"), std::string::npos) << four.output;
    // Summing four micro-batches' gradients rounds otherwise than one
    // batch's matrix product (about 1e-7): the float32 algorithms stay
    // within 1e-5 after 50 steps. The two that quantize to 8 bits
    // (MinMaxUInt8, 1/255 of a bucket's range a level) can round such a
    // difference to the next level; they stay within a few levels' worth.
    const bool quantized = algorithm == "bytegrad" || algorithm == "low_precision_decentralized";
    EXPECT_LT(max_abs_diff(model_parameters(dir_ / (algorithm + "-one") / "model.pt"),
                           model_parameters(dir_ / (algorithm + "-four") / "model.pt")),
              quantized ? 5e-3 : 1e-5);
    // The quiet micro-batches send nothing: the same bytes per step.
    const auto a = step_records(dir_ / (algorithm + "-one") / "metrics.jsonl");
    const auto b = step_records(dir_ / (algorithm + "-four") / "metrics.jsonl");
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["comm_bytes"], b[i]["comm_bytes"]) << a[i] << "\n" << b[i];
  }
}

// SIGUSR1 while the steps accumulate: the checkpoint is at a step
// boundary, and the resumed run ends with the uninterrupted run's weights.
TEST_F(RunTest, ASignalDuringAccumulationStopsAtAStepBoundaryAndTheResumeMatches) {
  const std::string sets = " --set train.grad_accum_steps=4 --set train.max_steps=60";
  RunOutcome whole = bagua_run(write_recipe("whole") + sets);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string recipe = write_recipe("stopped") + sets;
  const fs::path out = dir_ / "stopped.out";
  const pid_t pid = start_bagua_run(recipe + " --set train.log_every_steps=1", out);
  const fs::path file = dir_ / "stopped" / "metrics.jsonl";
  for (int i = 0; i < 600 && metrics(file).size() < 10; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGUSR1);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string text = slurp(out.string());
  ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 75) << text;
  ASSERT_NE(text.find("stopped by a signal at step"), std::string::npos) << text;
  RunOutcome resumed = bagua_run(recipe);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("done: 60 steps"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "whole" / "model.pt"), model_parameters(dir_ / "stopped" / "model.pt")),
            0.0);
}

// One step of plain SGD on 2 workers' 2 x 16 samples with a tiny clip:
// PyTorch, given the same samples and initial weights, computes the same
// norm and the same clipped step; every worker ends with the same weights.
TEST_F(RunTest, TheLoggedGradNormAndTheClippedStepArePyTorchs) {
  const fs::path samples = dir_ / "samples.txt";
  RunOutcome r = bagua_run(write_recipe("clip") + " --set train.max_steps=1 --set train.log_every_steps=1"
                                                  " --set train.clip_grad_norm=0.05"
                                                  " --set 'optimizers=[{type: sgd, lr: 0.5}]'",
                           "BAGUA_RECORD_SAMPLES=" + samples.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("final weights identical on all 2 workers"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gradient norm clipped at 0.05"), std::string::npos) << r.output;
  const auto records = step_records(dir_ / "clip" / "metrics.jsonl");
  ASSERT_EQ(records.size(), 1u);
  ASSERT_TRUE(records[0].contains("grad_norm")) << records[0];
  const double logged = records[0]["grad_norm"];
  // Both ranks' 16 samples of step 1, each rank's loss a mean: the
  // averaged gradient is the gradient of the mean over all 32.
  std::vector<int64_t> ids;
  for (const auto& s : steps_that_count(samples))
    if (s.step == 1) ids.insert(ids.end(), s.samples.begin(), s.samples.end());
  ASSERT_EQ(ids.size(), 32u);
  std::string list;
  for (int64_t i : ids) list += std::to_string(i) + ",";
  const fs::path py = dir_ / "clip.py";
  std::ofstream(py) << "import gzip, torch\n"
                       "src = '" << kFmnist << "'\n"
                       "img = gzip.open(src + 'train-images-idx3-ubyte.gz').read()[16:]\n"
                       "lab = gzip.open(src + 'train-labels-idx1-ubyte.gz').read()[8:]\n"
                       "ids = [" << list << "]\n"
                       "x = torch.tensor([list(img[i * 784:(i + 1) * 784]) for i in ids], dtype=torch.float32) / 255\n"
                       "y = torch.tensor([lab[i] for i in ids])\n"
                       "m = torch.jit.load('" << kSource << "/tests/fixtures/models/mlp_small.pt')\n"
                       "loss = torch.nn.functional.cross_entropy(m(x), y)\n"
                       "loss.backward()\n"
                       "norm = torch.nn.utils.clip_grad_norm_(list(m.parameters()), 0.05)\n"
                       "with torch.no_grad():\n"
                       "    for p in m.parameters(): p -= 0.5 * p.grad\n"
                       "done = torch.jit.load('" << (dir_ / "clip" / "model.pt").string() << "')\n"
                       "diff = max((a - b).abs().max().item() for a, b in zip(m.parameters(), done.parameters()))\n"
                       "print(norm.item(), diff)\n";
  FILE* pipe = popen(("OMP_NUM_THREADS=1 " + test_python() + " " + py.string()).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  double norm = -1, diff = -1;
  ASSERT_EQ(fscanf(pipe, "%lf %lf", &norm, &diff), 2);
  pclose(pipe);
  EXPECT_NEAR(logged, norm, 1e-4 * norm);
  EXPECT_GT(norm, 0.05) << "the clip must bite for the test to mean something";
  EXPECT_LT(diff, 1e-5) << "the clipped step differs from PyTorch's";
}

// bf16 autocast against fp32: the quickstart's MLP and the byte GPT train
// to within a stated margin (2 points of accuracy; 0.05 of eval loss).
TEST_F(RunTest, Bf16TrainsToWithinAMarginOfFp32) {
  const std::string mlp = kSource + "/recipes/fashion-mnist-mlp.yaml --set train.max_steps=150 --set train.eval_every=150";
  RunOutcome fp32 = bagua_run(mlp + " --set output.dir=" + (dir_ / "mlp32").string());
  RunOutcome bf16 = bagua_run(mlp + " --set train.precision=bf16 --set output.dir=" + (dir_ / "mlp16").string());
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_NE(bf16.output.find("bf16 autocast"), std::string::npos) << bf16.output;
  EXPECT_NEAR(final_accuracy(dir_ / "mlp16" / "metrics.jsonl"), final_accuracy(dir_ / "mlp32" / "metrics.jsonl"), 0.02);
  EXPECT_GT(max_abs_diff(model_parameters(dir_ / "mlp16" / "model.pt"), model_parameters(dir_ / "mlp32" / "model.pt")),
            0.0)
      << "bf16 changed nothing: was autocast on?";

  auto eval_loss = [](const fs::path& file) {
    double loss = -1;
    for (const auto& j : metrics(file))
      if (j.contains("eval_loss")) loss = j["eval_loss"];
    return loss;
  };
  const std::string gpt = kSource + "/recipes/bytes-gpt.yaml --set train.max_steps=60 --set train.eval_every=60";
  RunOutcome g32 = bagua_run(gpt + " --set output.dir=" + (dir_ / "gpt32").string());
  RunOutcome g16 = bagua_run(gpt + " --set train.precision=bf16 --set output.dir=" + (dir_ / "gpt16").string());
  ASSERT_EQ(g32.exit_code, 0) << g32.output;
  ASSERT_EQ(g16.exit_code, 0) << g16.output;
  EXPECT_NEAR(eval_loss(dir_ / "gpt16" / "metrics.jsonl"), eval_loss(dir_ / "gpt32" / "metrics.jsonl"), 0.05);
}

}  // namespace
