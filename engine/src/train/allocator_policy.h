// train.allocator: tuned (the default): glibc malloc keeps large blocks in
// its heap and reuses them instead of mapping and unmapping them, and does
// not hand freed memory back at every free. A training step allocates and
// frees the same model-sized tensors every step (activations, gradients
// outside buckets, optimizer temporaries); with glibc's defaults each one
// above the mmap threshold is a fresh mmap whose pages fault in again, which
// cost 1.2x in samples/s on a 20M-parameter MLP (docs/benchmarks.md).
//
// Applied once, first thing in a worker, by mallopt(): M_MMAP_MAX 0 (no
// mmap for malloc) and M_TRIM_THRESHOLD at its largest (free keeps the top
// of the heap). Not applied when the user chose for themselves: a MALLOC_*
// or GLIBC_TUNABLES variable, or an LD_PRELOAD (jemalloc, tcmalloc).
#pragma once

#include <string>

namespace bagua::train {

// What was done, for the log: "tuned", "system (train.allocator)", or
// "left as set by MALLOC_MMAP_MAX_" (the variable that was found).
std::string apply_allocator_policy(bool tuned);

}  // namespace bagua::train
