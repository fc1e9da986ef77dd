#include "optim/param_state_fields.h"

#include <bagua/errors.h>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

namespace bagua::optim {

bool is_fusable_type(const torch::optim::Optimizer& optimizer) {
  using namespace torch::optim;
  return dynamic_cast<const SGD*>(&optimizer) || dynamic_cast<const Adam*>(&optimizer) ||
         dynamic_cast<const AdamW*>(&optimizer) || dynamic_cast<const RMSprop*>(&optimizer) ||
         dynamic_cast<const Adagrad*>(&optimizer);
}

ParamStateFields fields_of(torch::optim::OptimizerParamState& state) {
  using namespace torch::optim;
  if (auto* s = dynamic_cast<SGDParamState*>(&state)) return {{&s->momentum_buffer()}, {}};
  if (auto* s = dynamic_cast<AdamParamState*>(&state)) {
    return {{&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()}, {static_cast<double>(s->step())}};
  }
  if (auto* s = dynamic_cast<AdamWParamState*>(&state)) {
    return {{&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()}, {static_cast<double>(s->step())}};
  }
  if (auto* s = dynamic_cast<RMSpropParamState*>(&state)) {
    return {{&s->square_avg(), &s->momentum_buffer(), &s->grad_avg()}, {static_cast<double>(s->step())}};
  }
  if (auto* s = dynamic_cast<AdagradParamState*>(&state)) return {{&s->sum()}, {static_cast<double>(s->step())}};
  throw InvalidArgument("fuse_optimizer: unknown optimizer state type (fusable: SGD, Adam, AdamW, RMSprop, Adagrad)");
}

}  // namespace bagua::optim
