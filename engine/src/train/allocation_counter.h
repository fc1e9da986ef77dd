// A testing and diagnosis aid (docs/run.md, "Testing aids"):
// BAGUA_COUNT_ALLOCATIONS=BYTES makes a worker count the CPU tensor
// allocations of at least BYTES that any of its threads makes during its
// training steps, from the third step on (the first two build optimizer
// state and buffers), and say how many at the end of its log. A model-sized
// allocation in a steady-state step costs a page fault per 4 KiB where the
// allocator gives the memory back (the reason for train.allocator), so the
// tests hold every algorithm to none above the size of its largest
// parameter (autograd's own gradients are as large as their parameters).
//
// It wraps c10's CPU allocator (GPU memory is not counted). Null unless the
// variable is set, so a production run pays one pointer test per step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace bagua::train {

class AllocationCounter {
 public:
  static std::unique_ptr<AllocationCounter> from_environment();
  ~AllocationCounter();

  void step_begins(int64_t steps_done);  // counting on from the third step
  void step_ends();                      // counting off
  // "allocations of at least N bytes in steady-state steps (3 to S): K (largest B bytes)"
  std::string summary() const;

 private:
  struct Wrapper;
  explicit AllocationCounter(int64_t threshold);
  Wrapper* wrapper_;  // installed as c10's CPU allocator for the rest of the process
  int64_t first_counted_ = -1, last_counted_ = -1;
};

}  // namespace bagua::train
