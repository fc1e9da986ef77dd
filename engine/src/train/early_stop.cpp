#include "train/early_stop.h"

#include "train/best_model.h"

#include <cmath>
#include <cstdio>

namespace bagua::train {

void EarlyStop::resume_from(const std::optional<BestEvaluation>& saved) {
  state_ = resumed_best(saved, spec_.goal);
}

// A count the checkpoint already held at patience (the final evaluation of
// a run whose length was then raised) ends the run at the next evaluation.
std::optional<std::string> EarlyStop::after_evaluation(const metrics::EvalRecord& r) {
  require_figure(spec_.goal, r, "train.early_stop");
  if (judge(state_, r, spec_.min_delta) || state_.evaluations_since < spec_.patience) return std::nullopt;
  const char* metric = to_string(spec_.goal.metric);
  std::string why = std::string(metric) + " has not improved";
  if (spec_.min_delta > 0) {
    char delta[48];
    std::snprintf(delta, sizeof(delta), " by more than %g", spec_.min_delta);
    why += delta;
  }
  const int64_t n = state_.evaluations_since;
  why += " for " + std::to_string(n) + (n == 1 ? " evaluation" : " evaluations");
  if (std::isnan(state_.value)) return why + " (none was a number)";
  return why + " (best " + figure_text(spec_.goal.metric, state_.value) + " at step " + std::to_string(state_.step) +
         ")";
}

}  // namespace bagua::train
