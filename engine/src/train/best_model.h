// Evaluations judged by a goal (bagua/recipe_spec.h's EvalGoal): the best so
// far (BestEvaluation, bagua/checkpoint_meta.h, which every checkpoint
// carries so that a resumed run goes on from it), and checkpoint.keep_best's
// copy of the best evaluation's model in OUTPUT/best/:
//
//   best/model.pt   the model evaluated (TorchScript, as OUTPUT/model.pt: the
//                   ranks' average for algorithms that keep one model per rank)
//   best/eval.json  its evaluation: the metrics.jsonl record, with "metric"
//                   and "mode"
//
// Rank 0 writes both into OUTPUT/.best.tmp (eval.json last), then renames it
// to best/, the earlier best/ moved to .best.old first and removed after; a
// run that starts finishes what a crash cut short (recover_best_dir()).
// train.early_stop's count is early_stop.h.
#pragma once

#include <bagua/checkpoint_meta.h>
#include <bagua/metrics.h>
#include <bagua/recipe_spec.h>

#include <torch/script.h>

#include <filesystem>
#include <optional>
#include <string>

namespace bagua::train {

// Whether `value` is better than `best` by more than `min_delta` in the
// goal's direction. NaN never is; any other number is better than no best.
bool improves(double value, const BestEvaluation& best, double min_delta = 0);

// Takes the evaluation `r` into `best`: returns true when its figure
// improves on the best (which it then becomes), else counts one more
// evaluation since the best. A record without the figure counts as no
// improvement.
bool judge(BestEvaluation& best, const metrics::EvalRecord& r, double min_delta = 0);

// Throws a user bagua::Error naming `key` (the recipe key that watches the
// goal) when the evaluation `r` does not report the goal's figure: a model
// whose evaluations never do (eval_perplexity of a model that is not a
// sequence model) fails at its first evaluation rather than never improving.
void require_figure(const EvalGoal& goal, const metrics::EvalRecord& r, const std::string& key);

// Where a run's judging starts: the checkpoint's state when it judged by the
// same goal, else nothing seen yet.
BestEvaluation resumed_best(const std::optional<BestEvaluation>& saved, const EvalGoal& goal);

// A figure's value as the eval line shows it: "0.4100" (eval_loss),
// "85.20%" (eval_accuracy), "11.52" (eval_perplexity).
std::string figure_text(EvalMetric metric, double value);

// Rank 0, before anything reads OUTPUT/best/: a replacement a crash
// interrupted is completed (a whole .best.tmp becomes best/ when best/ is
// missing, else .best.old does) and the leftovers are removed.
void recover_best_dir(const std::filesystem::path& out_dir);

// checkpoint.keep_best in one worker: every rank judges (the evaluation's
// figures are the same on all), rank 0 writes OUTPUT/best/.
class BestModel {
 public:
  BestModel(const EvalGoal& goal, std::filesystem::path out_dir, bool writer)
      : state_{goal}, out_dir_(std::move(out_dir)), writer_(writer) {}

  void resume_from(const std::optional<BestEvaluation>& saved) { state_ = resumed_best(saved, state_.goal); }
  const BestEvaluation& state() const { return state_; }

  // After an evaluation of `module`: when `r` is the best so far, rank 0
  // keeps the module and the record in OUTPUT/best/ (throwing a
  // bagua::Error naming the file when it cannot) and r.best names the
  // figure; returns whether it was. Throws require_figure()'s error.
  bool after_evaluation(const torch::jit::Module& module, metrics::EvalRecord& r);

 private:
  void keep(const torch::jit::Module& module, const metrics::EvalRecord& r) const;

  BestEvaluation state_;
  std::filesystem::path out_dir_;
  bool writer_;
};

}  // namespace bagua::train
