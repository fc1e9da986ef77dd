// The fused optimizer: Bagua's contrib.fuse_optimizer for LibTorch.
//
// fuse_optimizer(optimizer) flattens, within each parameter group, the
// parameters of one dtype and device into contiguous buffers (each
// parameter becomes a view into it, in place: the module sees the same
// tensors), does the same for their gradients and optimizer state, and
// returns a FusedOptimizer whose step() updates each buffer with the wrapped
// optimizer's own code, once, instead of once per parameter: a few large
// kernels instead of several small ones per parameter. The weights are
// bitwise those of the unfused optimizer (tests/optim/), for LibTorch's SGD,
// Adam, AdamW, RMSprop and Adagrad; other optimizer types are refused
// (InvalidArgument), as the state of each is known by name.
//
// Contract:
// - The FusedOptimizer's param_groups() are the original parameters (set the
//   learning rate there, as usual); it owns the wrapped optimizer, which must
//   not be stepped on its own afterwards.
// - A parameter whose .grad is undefined at step() gets a zero gradient (as
//   Bagua's bagua_ensure_grad), where LibTorch's optimizers would skip it:
//   momentum and weight decay then still apply to it.
// - With check_flatten (default), step() first checks that every parameter
//   and gradient still lives in its buffer; one that was replaced (autograd
//   after zero_grad set it to none, another component re-homing it) is
//   copied back in and re-pointed. Without, the caller promises it.
// - save()/load() read and write the unfused format, one state per
//   parameter: a checkpoint of a fused optimizer loads into the same
//   optimizer unfused, and the other way round.
// - Use with with_bagua(..., do_flatten = false): both would re-home the
//   parameters' gradients otherwise (it still works, with a copy per step).
#pragma once

#include <bagua/algorithms/algorithm.h>

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace bagua {

struct FuseOptions {
  // Flatten the parameters into new buffers. When false, a bucket is fused
  // only if its parameters already lie back to back in one storage (e.g.
  // flattened by the caller); the others stay unfused.
  bool do_flatten = true;
  // Before each step, check (and repair) that parameters and gradients still
  // live in their buffers; see the contract above.
  bool check_flatten = true;
  // A buffer takes parameters (whole, in order) up to this many bytes; the
  // next parameter starts another buffer. 0: 256 KiB for CPU tensors (see
  // docs/benchmarks.md: larger temporaries are page-faulted in at every
  // step), unlimited on GPUs.
  int64_t max_buffer_bytes = 0;
};

// One fused buffer: parameters of one dtype and device of one group.
struct FusedBufferInfo {
  size_t group = 0;
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  size_t parameters = 0;  // how many parameters share the buffer
  int64_t numel = 0;
  bool fused = false;     // false: stepped per parameter (see FuseOptions::do_flatten)
};

class FusedOptimizer : public torch::optim::Optimizer, public ZeroesGradientsInPlace {
 public:
  // Throws InvalidArgument for a null optimizer or one whose type is not
  // SGD, Adam, AdamW, RMSprop or Adagrad.
  explicit FusedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer, FuseOptions options = {});
  ~FusedOptimizer() override;

  // The fused update (Bagua's fuse_step): one call of the wrapped
  // optimizer's step over the buffers.
  at::Tensor step(LossClosure closure = nullptr) override;
  at::Tensor fuse_step(LossClosure closure = nullptr) { return step(std::move(closure)); }

  // Zeroes every gradient buffer with one kernel each (and re-points
  // gradients that were replaced). Optimizer::zero_grad() works too.
  void zero_grad_fused();
  void zero_grad_in_place() override { zero_grad_fused(); }

  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  std::vector<FusedBufferInfo> buffers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bagua's name: wraps `optimizer` (which it flattens in place) in a
// FusedOptimizer.
std::shared_ptr<FusedOptimizer> fuse_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                               bool do_flatten = true, bool check_flatten = true);

}  // namespace bagua
