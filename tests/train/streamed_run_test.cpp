// `bagua run` on the streamed formats, end to end with the real binary:
// a token file resumed at another world size mid-epoch with every sample
// trained on exactly once; an image folder with augmentation, loader
// threads and the Redis cache, whose cached and resumed runs end with the
// uninterrupted run's weights; a corrupt image that stops the run naming
// it, and skip_unreadable; and the two shipped recipes, briefly.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace {

using namespace bagua::testing;

// `n` windows of 65 token ids (< 256) from the shipped byte corpus's
// generator: n x 64 + 1 uint16 ids of varied text.
void write_tokens(const fs::path& path, int n) {
  std::ifstream corpus(kSource + "/recipes/data/bytes-train.bin", std::ios::binary);
  std::string bytes(static_cast<size_t>(n * 64 + 1) * 2, '\0');
  corpus.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(corpus) << "recipes/data/bytes-train.bin (scripts/make_token_corpus.py; ctest's example_data makes it)";
  std::ofstream(path, std::ios::binary) << bytes;
}

// The GPT on a token file of 192 samples (a number 2 and 3 workers
// divide): 2 workers, batch 8, 2 epochs (12 steps each), a checkpoint every
// 6 steps.
std::string token_recipe(const fs::path& dir, const std::string& name) {
  write_tokens(dir / "tokens.bin", 192);
  const fs::path path = dir / (name + ".yaml");
  std::ofstream(path) << "name: " << name << "\n"
                      << "model: {torchscript: " << kSource << "/recipes/models/byte_gpt.pt, loss: cross_entropy}\n"
                      << "data:\n"
                      << "  train: {format: tokens, path: " << (dir / "tok*.bin").string()
                      << ", context: 64, vocab_size: 256}\n"
                      << "  batch_size: 8\n"
                      << "optimizers: [{type: adamw, lr: 0.002}]\n"
                      << "distributed: {nproc_per_node: 2}\n"
                      << "train: {epochs: 2, log_every_steps: 5, eval_every: never}\n"
                      << "checkpoint: {every_steps: 6, keep: 2}\n"
                      << "output: {dir: " << (dir / name).string() << "}\n";
  return path.string();
}

TEST_F(RunTest, ATokenRunResumedAtAnotherSizeMidEpochTrainsOnEverySampleOnce) {
  const std::string recipe = token_recipe(dir_, "tokens");
  const fs::path samples = dir_ / "samples.txt";
  const std::string record = "BAGUA_RECORD_SAMPLES=" + samples.string();
  // 2 workers die at step 8 (the checkpoint: step 6, 96 samples in).
  RunOutcome two = bagua_run(recipe, record + " BAGUA_FAULT_AT_STEP=1:8");
  ASSERT_EQ(two.exit_code, 3) << two.output;
  EXPECT_NE(two.output.find("tokens tokens.bin: 192 samples of 64 tokens"), std::string::npos) << two.output;
  RunOutcome three = bagua_run(recipe + " --nproc-per-node 3", record);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("resized: 2 workers -> 3"), std::string::npos) << three.output;
  EXPECT_NE(three.output.find("epoch 1 continues after its first 96"), std::string::npos) << three.output;
  const auto seen = samples_per_epoch(samples);
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, counts] : seen) {
    EXPECT_EQ(counts.size(), 192u) << "epoch " << epoch;
    for (const auto& [i, times] : counts) {
      // Steps 7 and 8 of the first run were done again by the second;
      // the record keeps the steps that count.
      ASSERT_EQ(times, 1) << "epoch " << epoch << " sample " << i;
    }
  }
  const std::string provenance = read_file(dir_ / "tokens" / "provenance.json");
  EXPECT_NE(provenance.find((dir_ / "tokens.bin").string()), std::string::npos) << "each shard is recorded";
}

// 12 training and 3 validation PNGs per class, made by the shipped script.
std::string image_recipe(const fs::path& dir, const std::string& name, const std::string& extra = "",
                         const std::string& eval_folder = "val") {
  if (!fs::exists(dir / "fashion-images")) {
    EXPECT_EQ(std::system((kSource + "/scripts/make_image_folder.py --train-per-class 12 --val-per-class 3 --out " +
                           dir.string() + " > /dev/null")
                              .c_str()),
              0);
  }
  const fs::path path = dir / (name + ".yaml");
  std::ofstream(path) << "name: " << name << "\n"
                      << "model: {torchscript: " << kSource << "/recipes/models/cnn.pt, loss: cross_entropy}\n"
                      << "data:\n"
                      << "  train: {format: image_folder, path: " << (dir / "fashion-images/train").string()
                      << ", input_shape: [1, 28, 28], normalize: {mean: 0.3, std: 0.35}, random_flip: true, "
                         "random_crop: {padding: 3}}\n"
                      << "  eval: {format: image_folder, path: " << (dir / "fashion-images" / eval_folder).string()
                      << ", input_shape: [1, 28, 28], normalize: {mean: 0.3, std: 0.35}}\n"
                      << "  batch_size: 10\n"
                      << "  loader_threads: 2\n"
                      << "optimizers: [{type: sgd, lr: 0.02, momentum: 0.9}]\n"
                      << "distributed: {nproc_per_node: 2}\n"
                      << "train: {epochs: 3, log_every_steps: 3, eval_every: epoch}\n"
                      << "checkpoint: {every_steps: 4, keep: 2}\n"
                      << "output: {dir: " << (dir / name).string() << "}\n"
                      << extra;
  return path.string();
}

// The eval accuracies of a run, in order.
std::vector<double> eval_accuracies(const fs::path& metrics_file) {
  std::vector<double> out;
  for (const auto& j : metrics(metrics_file))
    if (j.contains("eval_accuracy")) out.push_back(j["eval_accuracy"].get<double>());
  return out;
}

TEST_F(RunTest, AnAugmentedImageFolderRunIsTheSameCachedAndResumed) {
  // An eval folder with 2 of the 10 classes: labelled by the training
  // classes' names (3 and 7, not 0 and 1), cached or not.
  const std::string recipe_plain = image_recipe(dir_, "plain", "", "val-two");
  for (const char* cls : {"3-dress", "7-sneaker"}) {
    fs::create_directories(dir_ / "fashion-images/val-two" / cls);
    fs::copy(dir_ / "fashion-images/val" / cls, dir_ / "fashion-images/val-two" / cls, fs::copy_options::recursive);
  }
  RunOutcome plain = bagua_run(recipe_plain);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("image_folder train: 120 images in 10 classes"), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("6 images in 2 classes of the training data's 10"), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("loader: 2 threads loading up to 4 batches ahead"), std::string::npos) << plain.output;
  EXPECT_NE(plain.output.find("eval accuracy"), std::string::npos) << plain.output;
  const auto want = model_parameters(dir_ / "plain" / "model.pt");
  const std::vector<double> want_eval = eval_accuracies(dir_ / "plain" / "metrics.jsonl");
  ASSERT_EQ(want_eval.size(), 3u) << "one evaluation per epoch";

  // The cache holds decoded pixels; each epoch's crops and flips are drawn
  // afresh after it, so epochs 2 and 3 (read from the cache) train alike,
  // and the cached eval set scores the same models alike.
  const std::string cached_recipe = image_recipe(dir_, "cached", "", "val-two");
  RunOutcome with_cache =
      bagua_run(cached_recipe + " --set 'data.cache={dataset_name: streamed-images, writer_buffer_size: 4}'");
  ASSERT_EQ(with_cache.exit_code, 0) << with_cache.output;
  EXPECT_NE(read_file(dir_ / "cached" / "logs" / "rank-0.log").find("(cached: redis"), std::string::npos);
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "cached" / "model.pt"), want), 0.0);
  EXPECT_EQ(eval_accuracies(dir_ / "cached" / "metrics.jsonl"), want_eval);

  // Killed at step 7 (checkpoint at step 4), resumed: the same augmentations.
  const std::string resumed = image_recipe(dir_, "resumed", "", "val-two");
  RunOutcome died = bagua_run(resumed, "BAGUA_FAULT_AT_STEP=0:7");
  ASSERT_EQ(died.exit_code, 3) << died.output;
  RunOutcome again = bagua_run(resumed);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resum"), std::string::npos) << again.output;
  EXPECT_EQ(max_abs_diff(model_parameters(dir_ / "resumed" / "model.pt"), want), 0.0);
}

TEST_F(RunTest, ACorruptImageStopsTheRunNamingItUnlessSkipUnreadable) {
  const std::string recipe = image_recipe(dir_, "corrupt");
  // A training image that is cut short, not the first (the launcher's
  // check decodes the first): the worker that meets it stops the run.
  const fs::path cls = dir_ / "fashion-images/train/3-dress";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(cls)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  const fs::path bad = files.at(5);
  const std::string bytes = read_file(bad);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  RunOutcome stopped = bagua_run(recipe);
  EXPECT_EQ(stopped.exit_code, 2) << stopped.output;
  EXPECT_NE(stopped.output.find(bad.string() + ": cannot read the image"), std::string::npos) << stopped.output;

  RunOutcome skipped = bagua_run(recipe + " --set data.train.skip_unreadable=true --set output.dir=" +
                                 (dir_ / "skipped").string());
  ASSERT_EQ(skipped.exit_code, 0) << skipped.output;
  int64_t counted = 0;
  for (const auto& j : metrics(dir_ / "skipped" / "metrics.jsonl"))
    if (j.contains("skipped_images")) counted = std::max<int64_t>(counted, j["skipped_images"].get<int64_t>());
  // Every rank's replacements together (rank 0's own used to be all the
  // metrics said, 0 when another rank met the file).
  EXPECT_GE(counted, 3) << "3 epochs: the file is met at least once per epoch, by whichever rank";
  std::string logs;
  for (const char* rank : {"rank-0.log", "rank-1.log"}) logs += read_file(dir_ / "skipped" / "logs" / rank);
  size_t said = 0;
  for (size_t at = logs.find("skipping " + bad.string()); at != std::string::npos;
       at = logs.find("skipping " + bad.string(), at + 1))
    ++said;
  EXPECT_GE(said, 1u) << logs;
  EXPECT_LE(said, 2u) << "once per file and worker: " << logs;
}

// The shipped recipes, on the data their scripts made, briefly.
TEST_F(RunTest, TheShippedStreamedRecipesTrain) {
  RunOutcome gpt = bagua_run(kSource + "/recipes/bytes-gpt.yaml --set train.max_steps=100 --set train.eval_every=100 "
                                       "--set output.dir=" + (dir_ / "gpt").string());
  ASSERT_EQ(gpt.exit_code, 0) << gpt.output;
  double eval_loss = 99, perplexity = 0;
  for (const auto& j : metrics(dir_ / "gpt" / "metrics.jsonl")) {
    if (!j.contains("eval_loss")) continue;
    eval_loss = j["eval_loss"].get<double>();
    ASSERT_TRUE(j.contains("eval_perplexity")) << j;
    perplexity = j["eval_perplexity"].get<double>();
  }
  EXPECT_NEAR(perplexity, std::exp(eval_loss), 1e-6 * perplexity);
  EXPECT_NE(gpt.output.find("perplexity"), std::string::npos) << gpt.output;
  // A byte-level model that learned nothing: ln 256 = 5.55; 100 steps give about 3.1.
  EXPECT_LT(eval_loss, 3.5) << gpt.output;

  RunOutcome cnn = bagua_run(kSource + "/recipes/fashion-images-cnn.yaml --set train.epochs=3 --set output.dir=" +
                             (dir_ / "cnn").string());
  ASSERT_EQ(cnn.exit_code, 0) << cnn.output;
  EXPECT_GE(final_accuracy(dir_ / "cnn" / "metrics.jsonl"), 0.6) << cnn.output;
}

}  // namespace
