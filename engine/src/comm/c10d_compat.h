// Every difference between the LibTorch versions we build against (Debian's
// 1.13 on CPU, a PyTorch 2.x wheel with CUDA) lives here and in
// c10d_compat.cpp, nowhere else.
//
// 1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup.
// 2.x:  they derive from c10d::Backend (ProcessGroup became a dispatcher).
// Both expose the same collective methods, so the rest of the code holds a
// `Backend` pointer and never names either base class.
#pragma once

#include <bagua/communication.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <chrono>
#include <string>

namespace bagua::comm {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif
using BackendPtr = c10::intrusive_ptr<Backend>;
using C10dWorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// The rendezvous store: the server on rank 0, a client elsewhere. The client
// retries until `timeout` while the server is not up yet.
StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                        std::chrono::milliseconds timeout);

// A store whose keys all carry `prefix`, so groups do not collide.
StorePtr make_prefix_store(const std::string& prefix, const StorePtr& store);

// Gloo over TCP. `loopback_only`: bind to 127.0.0.1 (all peers are local).
BackendPtr make_gloo(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                     bool loopback_only);

// NCCL; throws ConfigError when this build has no CUDA.
BackendPtr make_nccl(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout);

// True when this build has CUDA and a GPU is visible.
bool cuda_available();
// Makes `device` the current CUDA device (no-op without CUDA).
void set_cuda_device(int device);

c10d::ReduceOp to_c10d(ReduceOp op);

}  // namespace bagua::comm
