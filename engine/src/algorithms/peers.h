// What the decentralized algorithms share: who exchanges weights with
// whom, hierarchically or not, and on which steps.
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace bagua::algorithms {

// The group whose members exchange weights: the leaders when hierarchical
// (nullptr on the other ranks), else the whole group.
inline ProcessGroupPtr peer_group(const ProcessGroupPtr& comm, bool hierarchical) {
  if (!hierarchical) return comm;
  auto leaders = comm->node_leaders_group();
  return leaders->is_member() ? leaders : nullptr;
}

// Runs `exchange` on the weights `flat` among the peers, hierarchically or not.
template <typename Exchange>
void with_hierarchy(at::Tensor& flat, const ProcessGroupPtr& comm, bool hierarchical, Exchange&& exchange) {
  if (!hierarchical) {
    exchange(flat, comm);
    return;
  }
  auto intra = comm->intra_node_group();
  reduce(flat, 0, ReduceOp::AVG, intra);
  if (intra->rank() == 0) exchange(flat, comm->node_leaders_group());
  broadcast(flat, 0, intra);
}

// Steps 1, 1 + interval, 1 + 2 interval, ... communicate.
inline bool communication_step(int64_t step_counter, int64_t interval) { return (step_counter - 1) % interval == 0; }


}  // namespace bagua::algorithms
