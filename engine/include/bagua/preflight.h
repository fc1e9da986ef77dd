// The checks `bagua run`, `bagua plan` and `bagua bench` make before any
// worker starts, so that what cannot run fails once, in the launcher, with
// the recipe key that says why, instead of in every worker.
//
// Contract:
//   - check_supported(): throws a user Error naming the recipe key when
//     the recipe asks for something this build cannot run (an algorithm
//     without an implementation, train.device: cuda without a GPU).
//   - check_data(): checks every data source of the recipe without loading
//     it (check_dataset()), so bad data fails before any worker starts
//     (throws DataError naming file and line or record). With `share`, IDX
//     images are kept in memory for the workers to map (SharedData,
//     bagua/data.h).
#pragma once

#include <bagua/recipe.h>

namespace bagua {

class SharedData;  // bagua/data.h

void check_supported(const Recipe& recipe);

void check_data(const Recipe& recipe, SharedData* share = nullptr);

}  // namespace bagua
