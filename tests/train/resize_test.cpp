// A checkpoint resumed at another world size (or global batch): the data is
// re-sharded by the position in the epoch's sample order, the global batch
// is kept when train.global_batch_size asks, algorithms that keep one model
// per worker restart from the workers' average. Real runs of `bagua run`
// on real Fashion-MNIST samples.
#include "support/python.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace {

using namespace bagua::testing;

// The first `n` Fashion-MNIST training samples as an uncompressed IDX pair
// DIR/small-{images-idx3,labels-idx1}-ubyte, and a recipe over them.
std::string small_data_recipe(const fs::path& dir, int n, const std::string& name) {
  const std::string script =
      "import gzip, struct\n"
      "src = '" + kFmnist + "'\n"
      "images = gzip.open(src + 'train-images-idx3-ubyte.gz').read()\n"
      "labels = gzip.open(src + 'train-labels-idx1-ubyte.gz').read()\n"
      "n = " + std::to_string(n) + "\n"
      "open('" + (dir / "small-images-idx3-ubyte").string() + "', 'wb').write(struct.pack('>IIII', 2051, n, 28, 28) + images[16:16 + n * 784])\n"
      "open('" + (dir / "small-labels-idx1-ubyte").string() + "', 'wb').write(struct.pack('>II', 2049, n) + labels[8:8 + n])\n";
  const fs::path py = dir / "small.py";
  std::ofstream(py) << script;
  EXPECT_EQ(std::system((test_python() + " " + py.string()).c_str()), 0);
  const fs::path path = dir / (name + ".yaml");
  std::ofstream(path) << "name: " << name << "\n"
                      << "model: {torchscript: " << kSource << "/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}\n"
                      << "data:\n"
                      << "  train: {format: idx, images: " << (dir / "small-images-idx3-ubyte").string()
                      << ", labels: " << (dir / "small-labels-idx1-ubyte").string() << "}\n"
                      << "  batch_size: 16\n"
                      << "optimizers: [{type: sgd, lr: 0.05, momentum: 0.9}]\n"
                      << "scheduler: {type: cosine, warmup_steps: 3}\n"
                      << "distributed: {nproc_per_node: 2}\n"
                      << "train: {epochs: 2, log_every_steps: 5, eval_every: never}\n"
                      << "checkpoint: {every_steps: 7, keep: 2}\n"
                      << "output: {dir: " << (dir / name).string() << "}\n";
  return path.string();
}

// gradient_allreduce with train.global_batch_size: a run killed at step 9
// (its last checkpoint: step 7) and resumed by 1, 3 (batches of 11, 11 and
// 10, weighted) or 4 workers
// ends within float rounding of the run that kept 2 workers throughout: the
// same samples in every step, the same schedule.
TEST_F(RunTest, AResumeAtAnotherSizeWithAGlobalBatchMatchesTheFixedSizeRun) {
  const std::string recipe = small_data_recipe(dir_, 960, "fixed") + " --set train.global_batch_size=32";
  RunOutcome fixed = bagua_run(recipe + " --set train.max_steps=40");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const auto reference = model_parameters(dir_ / "fixed" / "model.pt");
  for (int world : {1, 3, 4}) {
    const std::string out = " --set output.dir=" + (dir_ / ("to" + std::to_string(world))).string();
    RunOutcome first = bagua_run(recipe + out + " --set train.max_steps=40", "BAGUA_FAULT_AT_STEP=1:9");
    ASSERT_EQ(first.exit_code, 3) << first.output;
    RunOutcome resumed = bagua_run(recipe + out + " --set train.max_steps=40 --nproc-per-node " + std::to_string(world));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resized: 2 workers -> " + std::to_string(world) +
                                  ", global batch 32 -> 32; epoch 1 continues after its first 224 of 960 samples"),
              std::string::npos)
        << resumed.output;
    EXPECT_EQ(resumed.output.find("the global batch changed"), std::string::npos) << resumed.output;
    EXPECT_NE(resumed.output.find("done: 40 steps"), std::string::npos) << resumed.output;
    const double diff = max_abs_diff(model_parameters(dir_ / ("to" + std::to_string(world)) / "model.pt"), reference);
    EXPECT_LT(diff, 1e-5) << "2 -> " << world << " workers";
    // Trained at all: not the exported weights.
    EXPECT_GT(max_abs_diff(reference, model_parameters(kSource + "/tests/fixtures/models/mlp_small.pt")), 1e-3);
    bool recorded = false;
    for (const auto& j : metrics(dir_ / ("to" + std::to_string(world)) / "metrics.jsonl")) {
      if (!j.contains("resized")) continue;
      recorded = true;
      EXPECT_EQ(j["step"], 7) << j;
      EXPECT_EQ(j["resized"]["world_size"], nlohmann::json::array({2, world})) << j;
      EXPECT_EQ(j["resized"]["global_batch"], nlohmann::json::array({32, 32})) << j;
      EXPECT_EQ(j["resized"]["epoch_position"], 224) << j;
    }
    EXPECT_TRUE(recorded) << "metrics.jsonl has no \"resized\" record";
  }
}

// With train.grad_accum_steps a resume at another size keeps the global
// batch by another number of micro-batches where batch x workers divides
// it: 2 workers x 2 micro-batches of 8 (32) resumed on 1 worker take 4, on
// 4 workers 1, and train to the fixed-size run's weights; on 3 workers 32
// does not divide, and the note says the global batch changed.
TEST_F(RunTest, AccumulationKeepsTheGlobalBatchAcrossAResizeWhereItDivides) {
  const std::string recipe = small_data_recipe(dir_, 960, "fixed") +
                             " --set data.batch_size=8 --set train.grad_accum_steps=2 --set train.max_steps=40";
  RunOutcome fixed = bagua_run(recipe);
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const auto reference = model_parameters(dir_ / "fixed" / "model.pt");
  for (int world : {1, 4, 3}) {
    SCOPED_TRACE(world);
    const fs::path out_dir = dir_ / ("to" + std::to_string(world));
    const std::string out = " --set output.dir=" + out_dir.string();
    RunOutcome first = bagua_run(recipe + out, "BAGUA_FAULT_AT_STEP=1:9");
    ASSERT_EQ(first.exit_code, 3) << first.output;
    RunOutcome resumed = bagua_run(recipe + out + " --nproc-per-node " + std::to_string(world));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("done: "), std::string::npos) << resumed.output;
    if (world == 3) {
      EXPECT_NE(resumed.output.find("note: the global batch changed with the world size: 32 is not a multiple of "
                                    "data.batch_size x workers (8 x 3)"),
                std::string::npos)
          << resumed.output;
      continue;
    }
    const int64_t accum = 32 / (8 * world);
    EXPECT_NE(resumed.output.find("train.grad_accum_steps 2 -> " + std::to_string(accum) + " keeps the global batch 32"),
              std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("global batch 32 -> 32"), std::string::npos) << resumed.output;
    EXPECT_NE(resumed.output.find("done: 40 steps"), std::string::npos) << resumed.output;
    EXPECT_LT(max_abs_diff(model_parameters(out_dir / "model.pt"), reference), 1e-5) << "2 -> " << world << " workers";
  }
}

// The other way, 4 workers resumed by 2, with the global batch kept: 4
// workers killed at step 17 roll back to the checkpoint of step 14, and 2
// workers replay from there to weights within float rounding of the run
// that kept 4 workers throughout, with its evaluation accuracy within 0.5
// points (measured: equal).
TEST_F(RunTest, FourWorkersResumedByTwoReplayTheFixedSizeRun) {
  const std::string recipe = small_data_recipe(dir_, 960, "four") + " --set train.global_batch_size=64" +
                             " --set 'data.eval={format: idx, images: " + kFmnist +
                             "t10k-images-idx3-ubyte.gz, labels: " + kFmnist +
                             "t10k-labels-idx1-ubyte.gz}' --set train.eval_every=epoch";
  auto accuracy = [](const fs::path& out) { return final_accuracy(out / "metrics.jsonl"); };
  RunOutcome fixed = bagua_run(recipe + " --nproc-per-node 4");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  const fs::path out = dir_ / "resized";
  const std::string at = " --set output.dir=" + out.string();
  RunOutcome four = bagua_run(recipe + at + " --nproc-per-node 4", "BAGUA_FAULT_AT_STEP=1:17");
  ASSERT_EQ(four.exit_code, 3) << four.output;
  RunOutcome two = bagua_run(recipe + at + " --nproc-per-node 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("resumed from " + (out / "checkpoints" / "step-00000014").string()), std::string::npos)
      << two.output;
  EXPECT_NE(two.output.find("resized: 4 workers -> 2, global batch 64 -> 64"), std::string::npos) << two.output;
  const auto reference = model_parameters(dir_ / "four" / "model.pt");
  EXPECT_LT(max_abs_diff(model_parameters(out / "model.pt"), reference), 1e-5) << "4 -> 2 workers";
  EXPECT_GT(max_abs_diff(reference, model_parameters(kSource + "/tests/fixtures/models/mlp_small.pt")), 1e-3);
  EXPECT_GT(accuracy(dir_ / "four"), 0.3) << "trained: " << fixed.output;
  EXPECT_NEAR(accuracy(out), accuracy(dir_ / "four"), 0.005) << two.output;
}

// 2 workers to step 10 (mid-epoch 1), 4 workers killed at step 15 (rolled
// back to the checkpoint of step 14), then 1 worker to the end: every
// sample of each epoch is trained on exactly once (the sizes divide what is
// left, so no padding repeats one), and each resize is in the log and in
// metrics.jsonl.
TEST_F(RunTest, EverySampleOfEachEpochIsSeenOnceAcrossResizesAndARollback) {
  const std::string recipe = small_data_recipe(dir_, 960, "chain");
  const fs::path samples = dir_ / "samples.txt";
  const std::string record = "BAGUA_RECORD_SAMPLES=" + samples.string();
  RunOutcome two = bagua_run(recipe + " --set train.max_steps=10", record);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  RunOutcome four = bagua_run(recipe + " --nproc-per-node 4", record + " BAGUA_FAULT_AT_STEP=1:15");
  ASSERT_EQ(four.exit_code, 3) << four.output;
  EXPECT_NE(four.output.find("resized: 2 workers -> 4, global batch 32 -> 64; epoch 1 continues after its first 320"),
            std::string::npos)
      << four.output;
  EXPECT_NE(four.output.find("set train.global_batch_size to keep it"), std::string::npos) << four.output;
  RunOutcome one = bagua_run(recipe + " --nproc-per-node 1", record);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // 14 steps, then (960 - 320 - 4 x 64) / 16 = 24 in epoch 1, then 60.
  EXPECT_NE(one.output.find("resized: 4 workers -> 1, global batch 64 -> 16; epoch 1 continues after its first 576"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("done: 98 steps"), std::string::npos) << one.output;

  const auto seen = samples_per_epoch(samples);
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, counts] : seen) {
    EXPECT_EQ(counts.size(), 960u) << "epoch " << epoch;
    for (const auto& [i, times] : counts) ASSERT_EQ(times, 1) << "epoch " << epoch << " sample " << i;
  }
  int resizes = 0;
  for (const auto& j : metrics(dir_ / "chain" / "metrics.jsonl")) {
    if (!j.contains("resized")) continue;
    ++resizes;
    // The 4-worker run had logged step 15 when it died; the checkpoint was
    // step 14.
    if (j["step"] == 14) {
      EXPECT_EQ(j.value("redone_steps", 0), 1) << j;
      EXPECT_EQ(j.value("redone_samples", 0), 64) << "one step of the 4 workers' global batch " << j;
      EXPECT_EQ(j.value("nodes", 0), 1) << j;
    }
    if (j["step"] == 10) {
      EXPECT_FALSE(j.contains("redone_steps")) << j;
    }
  }
  EXPECT_EQ(resizes, 2);
  EXPECT_NE(one.output.find("the run before had logged step 15: 1 step (64 samples) after the checkpoint is done again"),
            std::string::npos)
      << one.output;
  // bagua report counts them and marks each on the charts.
  RunOutcome report = bagua_command("report", (dir_ / "chain").string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("(resumed 2 times), 2 at another world size"), std::string::npos) << report.output;
  const std::string svg = read_file(dir_ / "chain" / "report.svg");
  EXPECT_NE(svg.find("2 -&gt; 4 workers"), std::string::npos);
  EXPECT_NE(svg.find("4 -&gt; 1 workers"), std::string::npos);
}

// decentralized and async keep one model per worker: resumed by 3 workers
// instead of 2, every worker starts from the workers' average (model.pt of
// the checkpoint), so with no step left to run their weights are identical,
// and the run then trains on at the new size.
TEST_F(RunTest, PerWorkerModelsRestartFromTheirAverageAtAnotherSize) {
  for (const std::string algorithm : {"decentralized", "async"}) {
    const std::string recipe = small_data_recipe(dir_, 960, algorithm) + " --set algorithm.name=" + algorithm +
                               (algorithm == "async" ? " --set algorithm.warmup_steps=2" : "");
    RunOutcome first = bagua_run(recipe + " --set train.max_steps=12");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    RunOutcome same = bagua_run(recipe + " --set train.max_steps=12 --nproc-per-node 3");
    ASSERT_EQ(same.exit_code, 0) << same.output;
    EXPECT_NE(same.output.find("note: " + algorithm + " keeps one model per worker: after a resize every worker "
                               "starts from the workers' average"),
              std::string::npos)
        << same.output;
    EXPECT_NE(same.output.find("final weights identical on all 3 workers"), std::string::npos) << same.output;
    RunOutcome on = bagua_run(recipe + " --set train.max_steps=20 --nproc-per-node 3");
    ASSERT_EQ(on.exit_code, 0) << on.output;
    EXPECT_NE(on.output.find("done: 20 steps"), std::string::npos) << on.output;
  }
}

// The other algorithms resumed at another size: bytegrad and qadam (state
// replicated: the checkpoint's model and optimizer state on every worker)
// and low_precision_decentralized (per-worker replicas, started afresh from
// the average) continue 2 -> 3 workers and finish, and a second resize back
// (3 -> 2) continues from the first one's checkpoint.
TEST_F(RunTest, EveryOtherAlgorithmResumesAtAnotherSize) {
  for (const std::string algorithm : {"bytegrad", "qadam", "low_precision_decentralized"}) {
    std::string recipe = small_data_recipe(dir_, 960, algorithm) + " --set algorithm.name=" + algorithm;
    if (algorithm == "qadam") recipe += " --set 'optimizers=[{type: qadam, lr: 0.002, warmup_steps: 4}]'";
    RunOutcome first = bagua_run(recipe + " --set train.max_steps=10");
    ASSERT_EQ(first.exit_code, 0) << first.output;
    RunOutcome grown = bagua_run(recipe + " --set train.max_steps=18 --nproc-per-node 3");
    ASSERT_EQ(grown.exit_code, 0) << algorithm << ":\n" << grown.output;
    EXPECT_NE(grown.output.find("resized: 2 workers -> 3"), std::string::npos) << grown.output;
    EXPECT_NE(grown.output.find("done: 18 steps"), std::string::npos) << grown.output;
    EXPECT_EQ(grown.output.find("WARNING"), std::string::npos) << grown.output;
    RunOutcome shrunk = bagua_run(recipe + " --set train.max_steps=22");
    ASSERT_EQ(shrunk.exit_code, 0) << algorithm << ":\n" << shrunk.output;
    EXPECT_NE(shrunk.output.find("resized: 3 workers -> 2"), std::string::npos) << shrunk.output;
    EXPECT_NE(shrunk.output.find("at step 18"), std::string::npos) << shrunk.output;
    EXPECT_NE(shrunk.output.find("done: 22 steps"), std::string::npos) << shrunk.output;
  }
}

}  // namespace
