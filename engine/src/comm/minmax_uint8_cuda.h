// The CUDA side of MinMaxUInt8 (minmax_uint8_cuda.cu), compiled only when
// CMake finds a CUDA compiler for a CUDA LibTorch (BAGUA_CUDA_KERNELS).
// Plain pointers and a stream, so the .cu file needs no LibTorch headers.
#pragma once

#include <cstdint>

namespace bagua::comm::cuda {

// Floats of scratch memory that compress() needs for `chunks` chunks of
// `chunk_numel` values.
int64_t minmax_uint8_scratch_floats(int64_t chunk_numel, int64_t chunks);

// `in`: numel floats; `out`: chunks * stride bytes; `scratch`: as above.
// `stream` is a cudaStream_t. Launches asynchronously; throws
// std::runtime_error when a launch fails.
void minmax_uint8_compress(const float* in, int64_t numel, int64_t chunks, int64_t chunk_numel,
                           int64_t stride, uint8_t* out, float* scratch, void* stream);
void minmax_uint8_decompress(const uint8_t* in, int64_t numel, int64_t chunks, int64_t chunk_numel,
                             int64_t stride, float* out, void* stream);

// out[i] = ((accumulate ? out[i] : 0) + d_0[i] + ... + d_{count-1}[i])
// [/ divisor, when not 0], d_k the values of sources[k] (each `chunks`
// chunks of `chunk_numel` values, `stride` bytes apart): the CPU loop's
// terms in its order, so the same bits. One pass per 8 sources.
void minmax_uint8_dequantise_sum(const uint8_t* const* sources, int count, int64_t numel, int64_t chunks,
                                 int64_t chunk_numel, int64_t stride, bool accumulate, float divisor, float* out,
                                 void* stream);

}  // namespace bagua::comm::cuda
