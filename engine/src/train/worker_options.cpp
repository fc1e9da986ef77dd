#include "train/worker_options.h"

namespace bagua::train {

JoinOptions join_options(const Recipe* recipe) {
  JoinOptions join;
  if (recipe == nullptr) return join;
  join.backend = recipe->distributed.backend;
  join.timeout = std::chrono::seconds(recipe->distributed.timeout_s);
  join.threads = recipe->train.threads;
  return join;
}

WithBaguaOptions with_bagua_options(const Recipe& recipe, int64_t tuned_bucket_bytes, int64_t step) {
  WithBaguaOptions options;
  options.do_flatten = recipe.algorithm.flatten;
  options.bucket_bytes = recipe.algorithm.bucket_size;
  if (recipe.algorithm.bucket_size_auto) {
    // A resumed run keeps the size tuned before; a fresh one tunes.
    if (tuned_bucket_bytes > 0) options.bucket_bytes = tuned_bucket_bytes;
    else options.autotune_buckets = true;
  }
  options.parameters_to_ignore = recipe.model.ignore_params;
  options.step_counter = step;
  options.may_skip_steps = recipe.train.on_nonfinite == OnNonFinite::kSkipStep;
  return options;
}

}  // namespace bagua::train
