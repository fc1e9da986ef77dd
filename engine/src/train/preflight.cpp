#include <bagua/preflight.h>

#include <bagua/algorithms/catalog.h>
#include <bagua/algorithms/registry.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>

#include "train/components.h"
#include "train/evaluation.h"
#include "train/model_check.h"
#include "train/worker_environment.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace bagua {

void check_supported(const Recipe& recipe) {
  auto unsupported = [](const std::string& key, const std::string& what) {
    throw Error(key + ": " + what + " is not implemented in this version of bagua yet", true);
  };
  const AlgorithmDescriptor* algorithm = find_algorithm(recipe.algorithm.name);
  if (algorithm == nullptr || !algorithm_implemented(algorithm->name)) {
    unsupported("algorithm.name", "algorithm '" + recipe.algorithm.name + "'");
  }
  if (recipe.train.device == Device::kCuda && torch::cuda::device_count() == 0) {
    train::choose_device(Device::kCuda, 0);  // throws the no-GPU error
  }
  // fp16 autocast and loss scaling are for GPUs (bf16 is the CPU's).
  if (recipe.train.precision == Precision::kFp16 &&
      (recipe.train.device == Device::kCpu || torch::cuda::device_count() == 0)) {
    throw Error(std::string("train.precision: fp16 runs on GPUs only, and this run trains on CPUs (") +
                    (recipe.train.device == Device::kCpu ? "train.device is cpu" : "no GPU is visible here") +
                    "); expected fp32 or bf16 (bfloat16 autocast, which CPUs run)", true);
  }
}

void check_data(const Recipe& recipe, SharedData* share) {
  check_dataset(recipe.data.train, target_kind_for(recipe.model.loss), load_options_for(recipe.data), share);
  if (recipe.data.eval)
    check_dataset(*recipe.data.eval, target_kind_for(recipe.model.loss), eval_load_options_for(recipe.data), share);
}

namespace {

// "[2, 784] float32"
std::string describe(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << c10::toString(t.scalar_type());
  return out.str();
}

// The last line of a TorchScript error (its traceback comes first), with
// the whole message written to `trace_file` when there is one.
std::string last_line(const std::exception& e, const std::string& trace_file, std::string* where) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  std::string last;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line.substr(line.find_first_not_of(" \t"));
  }
  if (!trace_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(trace_file).parent_path(), ec);
    std::ofstream out(trace_file);
    out << text << "\n";
    if (out) *where = " (the whole error, with any TorchScript traceback, is in " + trace_file + ")";
  }
  return last;
}

}  // namespace

namespace {

// The forward (and the loss) on the first samples of `data`, named by `key`
// (data.train or data.eval) in what it throws.
void probe_model(const Recipe& recipe, torch::jit::Module& module, const Dataset& data, const std::string& key,
                 const std::string& trace_file) {
  std::vector<int64_t> two{0};
  if (data.size() > 1) two.push_back(1);
  const Batch batch = data.get_batch(two);
  const std::string samples = std::to_string(two.size()) + " " + (key == "data.eval" ? "evaluation" : "training") +
                              " sample" + (two.size() > 1 ? "s" : "");
  torch::NoGradGuard no_grad;
  std::string where;
  at::Tensor out;
  const bool model_loss = recipe.model.loss == Loss::kModel;
  const DataSource& source = key == "data.eval" ? *recipe.data.eval : recipe.data.train;
  try {
    out = model_loss ? train::forward_output(module, nullptr, {batch.input, batch.target})
                     : train::forward_output(module, nullptr, {batch.input});
  } catch (const Error&) {
    throw;  // ours: already one line
  } catch (const std::exception& e) {
    const std::string why = last_line(e, trace_file, &where);
    // A dtype the model does not take: the data file's values decide it
    // (whole numbers load as integers, token ids), no shape can help.
    const bool dtype = why.find("dtype") != std::string::npos || why.find("scalar type") != std::string::npos;
    // Token ids (tokens, jsonl integer lists) have no input_shape: an id
    // beyond the embedding or a sequence beyond the positions fails here.
    const bool token_ids = at::isIntegralType(batch.input.scalar_type(), false) &&
                           (source.format == DataFormat::kTokens || source.format == DataFormat::kJsonl);
    // model.loss: model calls forward(input, target).
    const bool arity = model_loss && why.find("argument") != std::string::npos;
    std::string advice;
    if (arity) {
      advice = "model.loss: model calls forward(input, target) and trains on the one value it returns: give the "
               "model that forward, or name the loss in model.loss (e.g. cross_entropy)";
    } else if (dtype) {
      advice = "The inputs' dtype follows " + key + "'s values (whole numbers load as Long, for token ids): give "
               "the model what it takes, or a model that takes these (an embedding first, for token ids)";
    } else if (token_ids) {
      advice = "The inputs are token ids: every id must be below the model's vocabulary (its embedding's size) " +
               std::string(source.format == DataFormat::kTokens
                               ? "and " + key + ".context within its positions; set " + key +
                                     ".vocab_size to the model's vocabulary to have every id read checked"
                               : "and no sequence longer than its positions (" + key +
                                     ".max_length truncates them)");
    } else {
      advice = "Give " + key + ".input_shape the shape the model takes, one sample without the batch dimension "
               "(e.g. [1, 28, 28] for 28x28 grey images)" +
               // A CSV's width is the columns it reads: say which.
               (source.format == DataFormat::kCsv
                    ? ", or choose its columns with input_columns or exclude_columns (" + data.describe() + ")"
                    : std::string());
    }
    throw Error("the model's forward fails on " + samples + " of " + key + " (input " + describe(batch.input) +
                    (model_loss ? ", target " + describe(batch.target) : std::string()) + "): " + why + ". " +
                    advice + where,
                true);
  }
  // The samples the first two may not stand for (a token id beyond the
  // model's embedding, a sequence beyond its context), each beside sample
  // 0 or 1 so that the batch holds two as above.
  for (const Dataset::EdgeSample& edge : data.edge_samples()) {
    std::vector<int64_t> pair{edge.index};
    if (data.size() > 1) pair.push_back(edge.index == 0 ? 1 : 0);
    const Batch edge_batch = data.get_batch(pair);
    try {
      if (model_loss) (void)train::forward_output(module, nullptr, {edge_batch.input, edge_batch.target});
      else (void)train::forward_output(module, nullptr, {edge_batch.input});
    } catch (const std::exception& e) {
      std::string why = last_line(e, trace_file, &where);
      while (!why.empty() && why.back() == '.') why.pop_back();
      const std::string at = edge.line > 0 ? "line " + std::to_string(edge.line) + " of " + source.path
                                           : "sample " + std::to_string(edge.index) + " of " + source.path;
      throw Error(key + ": the model's forward fails on " + at + ", which holds " + edge.holds + ": " + why +
                      ". A batch that draws it would fail mid-run: fix the record, or give the model a "
                      "vocabulary (or context) that covers it" + where,
                  true);
    }
  }
  if (model_loss) {
    if (out.numel() != 1) {
      throw Error("model.loss is model, but the model's forward returned " + describe(out) +
                      ", not one loss value; return the loss from forward(input, target), or name a loss in "
                      "model.loss",
                  true);
    }
    return;
  }
  // Class indices beyond the model's outputs: the first samples may all be
  // in range, and a label out of it fails only when a batch holds it (a
  // worker's "Target 5 is out of bounds", mid-run).
  const int64_t classes = data.num_classes();
  if (target_kind_for(recipe.model.loss) == TargetKind::kClassIndex && out.dim() >= 2 && classes > out.size(-1)) {
    const bool tokens = source.format == DataFormat::kTokens;
    const std::string file = source.format == DataFormat::kIdx ? source.labels : source.path;
    throw Error(key + "'s " + (tokens ? "token ids (the targets) go" : "class labels go") + " up to " +
                    std::to_string(classes - 1) + " (" + data.describe() + ") but the model scores " +
                    std::to_string(out.size(-1)) + (out.size(-1) == 1 ? " class" : " classes") + " (its output " +
                    describe(out) +
                    "), so a batch holding a larger one would fail mid-run: give the model an output per " +
                    (tokens ? "token id (vocab_size " + std::to_string(classes) + ")" : "class (" + std::to_string(classes) + ")") +
                    ", or keep the targets of " + file + " within 0-" + std::to_string(out.size(-1) - 1),
                true);
  }
  try {
    (void)train::compute_loss(recipe.model.loss, out, batch.target);
  } catch (const std::exception& e) {
    std::string why = last_line(e, trace_file, &where);
    while (!why.empty() && why.back() == '.') why.pop_back();
    throw Error("model.loss: " + std::string(to_string(recipe.model.loss)) + " cannot take the model's output " +
                    describe(out) + " with " + key + "'s targets " + describe(batch.target) + ": " + why +
                    ". Choose the loss that fits the output (model.loss), or change what the model returns" + where,
                true);
  }
  // nll takes log-probabilities: on raw scores (no log_softmax) its loss
  // falls without bound, and the run "trains" to large negative losses.
  if (recipe.model.loss == Loss::kNll && out.dim() >= 2) {
    const int64_t class_dim = train::is_sequence_output(out, batch.target) ? out.dim() - 1 : 1;
    const at::Tensor mass = out.to(at::kDouble).exp().sum(class_dim);
    const double worst = (mass - 1.0).abs().max().item<double>();
    if (!(worst < 0.05)) {
      char sums[96];
      std::snprintf(sums, sizeof(sums), "%.3g to %.3g", mass.min().item<double>(), mass.max().item<double>());
      throw Error(std::string("model.loss: nll takes log-probabilities (a log_softmax output), but the "
                              "model's outputs on ") + samples + " of " + key + " are not: their exponentials "
                      "sum to " + sums + " over the classes, not 1, and the loss would fall without bound. Use "
                      "model.loss cross_entropy for raw scores (logits), or end the model with log_softmax",
                  true);
    }
  }
  // checkpoint.keep_best and train.early_stop watch a figure the
  // evaluations must report: said now, not at the first evaluation.
  const bool classify = is_classification(recipe.model.loss);
  const bool sequences =
      recipe.model.loss == Loss::kCrossEntropy && train::is_sequence_output(out, batch.target);
  auto watched = [&](const std::optional<EvalGoal>& goal, const std::string& goal_key) {
    if (!goal) return;
    const bool reported = goal->metric == EvalMetric::kEvalLoss ||
                          (goal->metric == EvalMetric::kEvalAccuracy && classify) ||
                          (goal->metric == EvalMetric::kEvalPerplexity && sequences);
    if (reported) return;
    throw Error(goal_key + ": " + to_string(goal->metric) + " is not reported by this run's evaluations: " +
                    (goal->metric == EvalMetric::kEvalAccuracy
                         ? "accuracy needs model.loss cross_entropy or nll"
                         : "perplexity needs model.loss cross_entropy over token sequences (outputs [B, T, V]); "
                           "this model's output is " + describe(out)) +
                    ". Watch eval_loss instead",
                true);
  };
  if (key == "data.train") {
    watched(recipe.checkpoint.keep_best, "checkpoint.keep_best.metric");
    if (recipe.train.early_stop) watched(recipe.train.early_stop->goal, "train.early_stop.metric");
  }
}

}  // namespace

namespace train {

void check_model_on(const Recipe& recipe, torch::jit::Module& module, const Dataset& train, const Dataset* eval,
                    const std::string& trace_file) {
  // model.ignore_params: a pattern that matches nothing is a typo.
  for (const std::string& pattern : recipe.model.ignore_params) {
    std::vector<std::string> names;
    bool any = false;
    for (const auto& p : module.named_parameters(true)) {
      names.push_back(p.name);
      any = any || glob_match(pattern, p.name);
    }
    if (any) continue;
    std::string listed;
    for (size_t i = 0; i < names.size() && i < 12; ++i) listed += (i ? ", " : "") + names[i];
    throw Error("model.ignore_params: '" + pattern + "' matches no parameter of " + recipe.model.torchscript +
                    " (its parameters: " + listed + (names.size() > 12 ? ", ..." : "") +
                    "); patterns are globs over these names (* and ?)",
                true);
  }
  if (train.size() == 0) return;  // check_data says so
  probe_model(recipe, module, train, "data.train", trace_file);
  if (eval && eval->size() > 0) probe_model(recipe, module, *eval, "data.eval", trace_file);
}

}  // namespace train

void check_model(const Recipe& recipe, const std::string& trace_file, const SharedData* shared) {
  torch::jit::Module module = train::load_model(recipe.model.torchscript, at::kCPU);
  LoadOptions options = load_options_for(recipe.data);
  options.shared = shared;  // IDX images check_data() inflated: mapped, not inflated again
  auto data = load_dataset(recipe.data.train, target_kind_for(recipe.model.loss), options);
  // Its inputs must suit the same model (a user Error when they cannot).
  const std::shared_ptr<Dataset> eval = data->size() > 0 ? train::load_eval_set(recipe, *data, shared) : nullptr;
  train::check_model_on(recipe, module, *data, eval.get(), trace_file);
}

}  // namespace bagua
