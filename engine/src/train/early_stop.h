// train.early_stop in one worker: each evaluation judged by the goal
// (best_model.h's judge(), with min_delta); after `patience` evaluations in
// a row without an improvement, the run ends at that step. Every rank judges
// the same figures (evaluations are reduced over the ranks), so every rank
// decides alike, without a collective of its own. The count is checkpointed
// (CheckpointMeta::early_stop), so a resumed run goes on counting.
#pragma once

#include <bagua/checkpoint_meta.h>
#include <bagua/metrics.h>
#include <bagua/recipe_spec.h>

#include <optional>
#include <string>

namespace bagua::train {

class EarlyStop {
 public:
  explicit EarlyStop(const EarlyStopSpec& spec) : spec_(spec), state_{spec.goal} {}

  void resume_from(const std::optional<BestEvaluation>& saved);
  const BestEvaluation& state() const { return state_; }

  // Takes the evaluation `r`; returns why the run ends now ("eval_loss has
  // not improved for 3 evaluations (best 0.4100 at step 600)"),
  // or nothing. Throws require_figure()'s error.
  std::optional<std::string> after_evaluation(const metrics::EvalRecord& r);

 private:
  EarlyStopSpec spec_;
  BestEvaluation state_;
};

}  // namespace bagua::train
