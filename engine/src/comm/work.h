// The state behind bagua::Work: a c10d work (or none) plus the step that
// finishes the collective once the data has arrived (divide for AVG, copy a
// temporary back into the caller's tensor, reduce gathered chunks, ...).
#pragma once

#include <bagua/communication.h>

#include "comm/c10d_compat.h"

#include <functional>
#include <string>
#include <vector>

namespace bagua {

struct Work::State {
  std::vector<comm::C10dWorkPtr> works;  // waited in order
  std::function<void()> finish;          // runs once, after the works
  std::string what;                      // "allreduce on group [0, 1] (rank 0 of 2)"
  std::chrono::milliseconds timeout{0};
  // NCCL: wait() makes the current CUDA stream wait for the works, as
  // PyTorch's does, and returns without blocking the host; a peer that
  // never comes is NCCL's watchdog's to find (its timeout is the group's).
  bool stream_ordered = false;
  bool done = false;
};

namespace comm {
// A Work from its parts; `what` names the collective for error messages.
// `stream_ordered`: the works are NCCL's (see State::stream_ordered).
Work make_work(std::vector<C10dWorkPtr> works, std::function<void()> finish, std::string what,
               std::chrono::milliseconds timeout, bool stream_ordered = false);
}  // namespace comm

}  // namespace bagua
