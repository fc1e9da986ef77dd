// The model preflight of `bagua run` (bagua/preflight.h, check_model): a
// model file that is not TorchScript, inputs the model cannot take, and an
// output the loss cannot take fail in the launcher, before any worker
// starts, in one line naming the key to change, with no C++ or
// TorchScript traceback in front of the user.
#include "support/python.h"
#include "support/bagua_run.h"
#include "train/worker_environment.h"

#include <bagua/errors.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace bagua::testing {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

size_t lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

// What no refusal may show a user.
void expect_no_trace(const std::string& output) {
  EXPECT_EQ(output.find("internal error"), std::string::npos) << output;
  EXPECT_EQ(output.find("PytorchStreamReader"), std::string::npos) << output;
  EXPECT_EQ(output.find("Traceback"), std::string::npos) << output;
  EXPECT_EQ(output.find("frame #"), std::string::npos) << output;
  EXPECT_LE(lines(output), 4u) << output;
}

class Preflight : public RunTest {
 protected:
  // Runs Debian's python (with torch) on `script`, with the argument `out`.
  void python(const std::string& script, const fs::path& out) {
    const fs::path file = dir_ / "make.py";
    std::ofstream(file) << script;
    const std::string cmd = test_python() + " " + file.string() + " " + out.string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  // `bagua run ARGS` into a fresh output directory: refused before any
  // worker starts (exit 2, no metrics), saying `expect` once, no trace.
  void expect_refused(const std::string& args, const std::string& expect) {
    const fs::path out = dir_ / "out";
    fs::remove_all(out);
    RunOutcome r = bagua_run(args + " --set output.dir=" + out.string());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(count(r.output, expect), 1u) << r.output;
    expect_no_trace(r.output);
    EXPECT_FALSE(fs::exists(out / "metrics.jsonl")) << "a worker started";
  }

  // A 4-input, 3-class linear model and 40-row CSV files: train.csv
  // (labels 0-2), bad_label.csv (a 5 on row 31), wide_eval.csv (5 inputs);
  // the recipe trains on train.csv and evaluates on it, 3 steps an epoch.
  fs::path csv_recipe() {
    const fs::path model = dir_ / "four_to_three.pt";
    python("import sys, torch\n"
           "torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 3))).save(sys.argv[1])\n",
           model);
    auto csv = [&](const std::string& name, int width, int bad_row) {
      std::ofstream out(dir_ / name);
      for (int c = 0; c < width; ++c) out << "f" << c << ",";
      out << "label\n";
      for (int row = 0; row < 40; ++row) {
        for (int c = 0; c < width; ++c) out << (row * 7 + c) % 5 << ",";
        out << (row == bad_row ? 5 : row % 3) << "\n";
      }
    };
    csv("train.csv", 4, -1);
    csv("bad_label.csv", 4, 30);
    csv("wide_eval.csv", 5, -1);
    const fs::path recipe = dir_ / "csv.yaml";
    std::ofstream(recipe) << "name: csv\n"
                          << "model: {torchscript: " << model.string() << ", loss: cross_entropy}\n"
                          << "data:\n"
                          << "  train: {format: csv, path: train.csv, target_column: label}\n"
                          << "  eval: {format: csv, path: train.csv, target_column: label}\n"
                          << "  batch_size: 8\n"
                          << "optimizers: [{type: sgd, lr: 0.05}]\n"
                          << "distributed: {nproc_per_node: 2}\n"
                          << "train: {epochs: 1}\n";
    return recipe;
  }
};

// torch.save() of a whole model, of a state_dict, and a text file: each
// said once, with what the file is and how to export TorchScript; no
// worker started (no metrics), exit 2.
TEST_F(Preflight, AFileThatIsNotTorchScriptIsRefusedInOneLine) {
  const std::string model_class =
      "import sys, torch\n"
      "class M(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.l = torch.nn.Linear(784, 10)\n"
      "    def forward(self, x):\n"
      "        return self.l(x)\n";
  const fs::path pickled = dir_ / "pickled.pt", state = dir_ / "state.pt", text = dir_ / "text.pt";
  python(model_class + "torch.save(M(), sys.argv[1])\n", pickled);
  python(model_class + "torch.save(M().state_dict(), sys.argv[1])\n", state);
  std::ofstream(text) << "not a model\n";
  for (const auto& [file, kind] : {std::pair<fs::path, std::string>{pickled, "it was written by torch.save()"},
                                   {state, "it was written by torch.save()"},
                                   {text, "it is not a zip archive"}}) {
    SCOPED_TRACE(file.string());
    const std::string recipe = write_recipe("m", "", fs::relative(file, kSource).string());
    for (const char* command : {"validate", "run", "plan"}) {
      RunOutcome r = bagua_command(command, recipe);
      EXPECT_EQ(r.exit_code, 2) << command << ": " << r.output;
      EXPECT_EQ(count(r.output, "expected a TorchScript file, found " + file.string()), 1u) << r.output;
      EXPECT_NE(r.output.find("model.torchscript"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(kind), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("torch.jit.script(model).save("), std::string::npos) << r.output;
      expect_no_trace(r.output);
    }
    EXPECT_FALSE(fs::exists(dir_ / "m" / "metrics.jsonl")) << "a worker started";
    // Past validation (a file changed after it, a worker of torchrun's):
    // the worker's load says the same in one line.
    try {
      train::load_model(file.string(), at::kCPU);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_TRUE(e.is_user_error());
      EXPECT_NE(std::string(e.what()).find("is not a TorchScript file: " + kind), std::string::npos) << e.what();
      expect_no_trace(e.what());
    }
  }
}

// The CNN recipe's model fed the flat 784 pixels (no input_shape): one
// line naming data.train.input_shape, the TorchScript traceback in
// OUTPUT/logs/preflight.log; with input_shape it trains.
TEST_F(Preflight, ACnnWithoutInputShapeNamesTheKey) {
  const std::string recipe = write_recipe("cnn", "", "recipes/models/cnn.pt");
  RunOutcome r = bagua_run(recipe);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count(r.output, "data.train.input_shape"), 1u) << r.output;
  EXPECT_NE(r.output.find("[2, 784] Float"), std::string::npos) << r.output;
  expect_no_trace(r.output);
  const fs::path trace = dir_ / "cnn" / "logs" / "preflight.log";
  ASSERT_TRUE(fs::exists(trace)) << r.output;
  EXPECT_NE(r.output.find(trace.string()), std::string::npos) << r.output;
  EXPECT_NE(read_file(trace).find("Traceback"), std::string::npos) << read_file(trace);
  r = bagua_run(recipe + " --set 'data.train.input_shape=[1, 28, 28]' --set train.max_steps=4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A loss that cannot take the model's output: model.loss named, with the
// output's and the targets' shapes.
TEST_F(Preflight, ALossThatDoesNotFitTheOutputNamesModelLoss) {
  const std::string recipe = write_recipe("loss", "");
  RunOutcome r = bagua_run(recipe + " --set model.loss=bce_with_logits");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model.loss: bce_with_logits cannot take the model's output [2, 10]"), std::string::npos)
      << r.output;
  expect_no_trace(r.output);
  EXPECT_FALSE(fs::exists(dir_ / "loss" / "metrics.jsonl")) << "a worker started";
}

// A class label beyond the model's outputs on row 31 of 40 (the first
// samples, which the forward probe runs, are in range), evaluation data the
// model cannot take, and an early stop on a figure a classifier's
// evaluations never report: each refused before any worker starts, naming
// the file or the key, where they used to fail mid-run with a worker's "Target
// 5 is out of bounds" (behind its peer's Gloo error) or at the first
// evaluation with a TorchScript traceback.
TEST_F(Preflight, LabelsBeyondTheOutputsAndEvalDataTheModelCannotTakeAreRefused) {
  const fs::path recipe = csv_recipe();
  struct Case {
    std::string sets, expect;
  };
  // (An override's relative path is the working directory's: absolute here.)
  const std::string bad_label = (dir_ / "bad_label.csv").string(), wide = (dir_ / "wide_eval.csv").string();
  for (const Case& c : {Case{"--set data.train.path=" + bad_label, "data.train's class labels go up to 5"},
                        Case{"--set data.eval.path=" + bad_label, "data.eval's class labels go up to 5"},
                        Case{"--set 'train.early_stop={patience: 2, metric: eval_perplexity}'",
                             "train.early_stop.metric: eval_perplexity is not reported by this run's evaluations"},
                        Case{"--set model.loss=nll",
                             "model.loss: nll takes log-probabilities (a log_softmax output), but the model's "
                             "outputs on 2 training samples of data.train are not"},
                        Case{"--set 'model.ignore_params=[extr.*]'",
                             "model.ignore_params: 'extr.*' matches no parameter of "},
                        Case{"--set model.loss=model",
                             "model.loss: model calls forward(input, target) and trains on the one value it returns"},
                        Case{"--set data.eval.path=" + wide,
                             "the model's forward fails on 2 evaluation samples of data.eval (input [2, 5]"}}) {
    SCOPED_TRACE(c.sets);
    expect_refused(recipe.string() + " " + c.sets, c.expect);
  }
  // Labels 0-2 for 3 outputs, eval data like the training data: trains.
  RunOutcome good = bagua_run(recipe.string() + " --set output.dir=" + (dir_ / "good").string());
  EXPECT_EQ(good.exit_code, 0) << good.output;
  // nll on a model ending in log_softmax: trains.
  const fs::path log_probs = dir_ / "log_probs.pt";
  python("import sys, torch\n"
         "m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LogSoftmax(1))\n"
         "torch.jit.script(m).save(sys.argv[1])\n",
         log_probs);
  RunOutcome nll = bagua_run(recipe.string() + " --set model.loss=nll --set model.torchscript=" + log_probs.string() +
                             " --set output.dir=" + (dir_ / "nll").string());
  EXPECT_EQ(nll.exit_code, 0) << nll.output;
}

// (With the data above.) A finished run names the limit that ended it: run
// again, "raise train.epochs"; with a max_steps beyond the one epoch, the
// workers resume, train nothing and say that train.epochs still ends the
// run, where they used to end with "0 in this run" and no reason.
TEST_F(Preflight, AFinishedRunSaysWhichLimitToRaise) {
  const std::string recipe = csv_recipe().string() + " --set output.dir=" + (dir_ / "out").string();
  ASSERT_EQ(bagua_run(recipe).exit_code, 0);
  RunOutcome again = bagua_run(recipe);
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(count(again.output, "already complete at step 3"), 1u) << again.output;
  EXPECT_EQ(count(again.output, "to train further, raise train.epochs;"), 1u) << again.output;
  RunOutcome raised = bagua_run(recipe + " --set train.max_steps=100");
  EXPECT_EQ(raised.exit_code, 0) << raised.output;
  EXPECT_EQ(count(raised.output, "nothing left to train: step 3 is the end of this recipe's run (train.epochs 1 of "
                                 "3 steps; train.max_steps 100 is beyond it); raise train.epochs to train further"),
            1u)
      << raised.output;
  RunOutcome capped = bagua_run(recipe + " --set train.epochs=3 --set train.max_steps=5");
  EXPECT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_EQ(count(capped.output, "done: 5 steps"), 1u) << capped.output;
  RunOutcome capped_again = bagua_run(recipe + " --set train.epochs=3 --set train.max_steps=5");
  EXPECT_EQ(count(capped_again.output, "to train further, raise train.max_steps;"), 1u) << capped_again.output;
}

// Token sequences whose first records are fine but a later one holds an id
// beyond the model's embedding, a negative id, or a sequence longer than
// its positions: the preflight probes the record holding the largest id,
// the smallest and the longest, and names its line, where each used to
// fail mid-run ("index out of range in self" behind a peer's Gloo error).
TEST_F(Preflight, ATokenIdOrSequenceTheModelCannotTakeIsNamedByItsLine) {
  const fs::path model = dir_ / "tokens.pt";
  python("import sys, torch\n"
         "class M(torch.nn.Module):\n"
         "    def __init__(s):\n"
         "        super().__init__()\n"
         "        s.emb = torch.nn.Embedding(10, 4)\n"
         "        s.pos = torch.nn.Parameter(torch.zeros(8, 4))\n"
         "        s.fc = torch.nn.Linear(4, 2)\n"
         "    def forward(s, x):\n"
         "        return s.fc((s.emb(x) + s.pos[:x.size(1)]).mean(1))\n"
         "torch.jit.script(M()).save(sys.argv[1])\n",
         model);
  // 24 records of 3 to 6 ids in 1-9; `line` (1-based) gets `tokens`.
  auto jsonl = [&](const std::string& name, int line, const std::string& tokens) {
    std::ofstream out(dir_ / name);
    for (int r = 1; r <= 24; ++r) {
      std::string ids;
      for (int i = 0; i < 3 + r % 4; ++i) ids += (i ? "," : "") + std::to_string(1 + (r + i) % 9);
      out << "{\"x\": [" << (r == line ? tokens : ids) << "], \"y\": " << r % 2 << "}\n";
    }
  };
  jsonl("good.jsonl", 0, "");
  jsonl("oov.jsonl", 7, "1,2,10,3");
  jsonl("negative.jsonl", 9, "4,-1,5");
  jsonl("long.jsonl", 5, "2,3,4,5,6,7,8,2,3,4,5,6");
  jsonl("first.jsonl", 1, "1,12,3");
  const fs::path recipe = dir_ / "tokens.yaml";
  std::ofstream(recipe) << "name: tokens\n"
                        << "model: {torchscript: " << model.string() << ", loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: jsonl, path: good.jsonl, input_field: x, target_field: y}\n"
                        << "  batch_size: 4\n"
                        << "optimizers: [{type: sgd, lr: 0.05}]\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 1}\n";
  struct Case {
    std::string file, expect;
  };
  for (const Case& c : {Case{"oov.jsonl", "fails on line 7 of " + (dir_ / "oov.jsonl").string() +
                                              ", which holds the data's largest token id (10): "},
                        Case{"negative.jsonl", "fails on line 9 of " + (dir_ / "negative.jsonl").string() +
                                                   ", which holds the data's smallest token id (-1): "},
                        Case{"long.jsonl", "fails on line 5 of " + (dir_ / "long.jsonl").string() +
                                               ", which holds the data's longest sequence (12 tokens): "},
                        // In the first batch: no line to name, but what token ids need.
                        Case{"first.jsonl", "The inputs are token ids: every id must be below the model's "
                                            "vocabulary (its embedding's size) and no sequence longer than its "
                                            "positions (data.train.max_length truncates them)"}}) {
    SCOPED_TRACE(c.file);
    expect_refused(recipe.string() + " --set data.train.path=" + (dir_ / c.file).string(), c.expect);
  }
  // Ids 1-9 and at most 6 positions: trains.
  RunOutcome good = bagua_run(recipe.string() + " --set output.dir=" + (dir_ / "good").string());
  EXPECT_EQ(good.exit_code, 0) << good.output;
}

}  // namespace
}  // namespace bagua::testing
