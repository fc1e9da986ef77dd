// The options a worker joins the group and wraps its model with, built from
// the recipe in one place for `bagua run`'s workers and `bagua bench`'s, so
// the bench measures what the run runs (the same backend, timeout, threads,
// buckets, bucket autotune and ignored parameters).
#pragma once

#include <bagua/distributed.h>
#include <bagua/recipe_spec.h>

#include "train/worker_environment.h"

#include <cstdint>

namespace bagua::train {

// distributed.backend, distributed.timeout_s and train.threads; the
// defaults without a recipe (a bench of the synthetic model).
JoinOptions join_options(const Recipe* recipe);

// algorithm.flatten, bucket_size (auto: tune, unless a resumed run already
// tuned `tuned_bucket_bytes`), model.ignore_params, train.on_nonfinite's
// skips; the module's step counter starts at `step` (the steps a resumed
// run has done: one forward per optimizer step).
WithBaguaOptions with_bagua_options(const Recipe& recipe, int64_t tuned_bucket_bytes = 0, int64_t step = 0);

}  // namespace bagua::train
