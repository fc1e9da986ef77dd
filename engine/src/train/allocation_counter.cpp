#include "train/allocation_counter.h"

#include "common/libtorch_compat.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace bagua::train {

// Forwards to the allocator it replaced; counts while `on`.
struct AllocationCounter::Wrapper final : public c10::Allocator {
  Wrapper(c10::Allocator* inner, int64_t threshold) : inner(inner), threshold(threshold) {}

  // const in LibTorch 1.13, not in 2.x: both (common/libtorch_compat.h).
  BAGUA_ALLOCATOR_ALLOCATE(counted)

  c10::DataPtr counted(size_t n) const {
    if (on.load(std::memory_order_relaxed) && static_cast<int64_t>(n) >= threshold) {
      count.fetch_add(1, std::memory_order_relaxed);
      int64_t seen = largest.load(std::memory_order_relaxed);
      while (static_cast<int64_t>(n) > seen && !largest.compare_exchange_weak(seen, static_cast<int64_t>(n))) {
      }
    }
    return inner->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return inner->raw_deleter(); }
  // Pure virtual in newer LibTorch (the CUDA build's wheel), absent in 1.13
  // (common/libtorch_compat.h).
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

  c10::Allocator* inner;
  const int64_t threshold;
  mutable std::atomic<int64_t> count{0};
  mutable std::atomic<int64_t> largest{0};
  std::atomic<bool> on{false};
};

std::unique_ptr<AllocationCounter> AllocationCounter::from_environment() {
  const char* spec = std::getenv("BAGUA_COUNT_ALLOCATIONS");
  if (spec == nullptr || *spec == '\0') return nullptr;
  char* end = nullptr;
  const long long bytes = std::strtoll(spec, &end, 10);
  if (end == spec || *end != '\0' || bytes <= 0) return nullptr;
  return std::unique_ptr<AllocationCounter>(new AllocationCounter(bytes));
}

AllocationCounter::AllocationCounter(int64_t threshold)
    : wrapper_(new Wrapper(c10::GetCPUAllocator(), threshold)) {  // never freed: tensors may outlive us
  c10::SetCPUAllocator(wrapper_, std::numeric_limits<uint8_t>::max());
}

AllocationCounter::~AllocationCounter() { wrapper_->on = false; }

void AllocationCounter::step_begins(int64_t steps_done) {
  if (steps_done < 2) return;
  if (first_counted_ < 0) first_counted_ = steps_done + 1;
  last_counted_ = steps_done + 1;
  wrapper_->on = true;
}

void AllocationCounter::step_ends() { wrapper_->on = false; }

std::string AllocationCounter::summary() const {
  std::string out = "allocations of at least " + std::to_string(wrapper_->threshold) + " bytes in steady-state steps";
  if (first_counted_ < 0) return out + ": none counted (fewer than 3 steps)";
  return out + " (" + std::to_string(first_counted_) + " to " + std::to_string(last_counted_) +
         "): " + std::to_string(wrapper_->count.load()) + " (largest " + std::to_string(wrapper_->largest.load()) +
         " bytes)";
}

}  // namespace bagua::train
