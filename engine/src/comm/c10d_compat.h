// c10d's process groups and stores behind version-neutral names. The
// differences between the LibTorch versions bagua builds against are listed
// in common/libtorch_compat.h; the ones in c10d's factories live in
// c10d_compat.cpp.
#pragma once

#include <bagua/communication.h>

#include "common/libtorch_compat.h"

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace bagua::comm {

using Backend = compat::C10dBackend;
using BackendPtr = c10::intrusive_ptr<Backend>;
using C10dWorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// The rendezvous store: the server on rank 0, a client elsewhere. The client
// retries until `timeout` while the server is not up yet.
StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                        std::chrono::milliseconds timeout);

// The store of a one-node run: c10d's FileStore at `path` (nothing on the
// network). Never removes the file itself; its creator removes its
// directory (RendezvousServer::private_file()).
StorePtr make_file_store(const std::string& path);

// BAGUA_STORE_FILE: set by bagua run's launcher for a one-node run, whose
// workers then meet through that file instead of MASTER_ADDR:MASTER_PORT.
// Empty when unset.
std::string store_file_from_env();

// A store whose keys all carry `prefix`, so groups do not collide.
StorePtr make_prefix_store(const std::string& prefix, const StorePtr& store);

// The prefix of this worker's rendezvous keys: "attempt-K/" for the
// launcher's restart attempt K (TORCHELASTIC_RESTART_COUNT), so that on a
// store that outlives attempts (bagua's agent, torchrun's static
// rendezvous) a restarted node never meets a worker of an earlier attempt.
// Under torch elastic's dynamic rendezvous (TORCHELASTIC_USE_AGENT_STORE
// set to False: c10d, etcd) the store is this round's own, served by its
// rank 0, and the agents' restart counts may differ (a node that joins
// starts at 0; one whose workers stopped for a membership change may have
// counted a failure): no prefix there, or those workers never meet.
std::string rendezvous_scope();

// Gloo over TCP, bound to `interface` when it is not empty (see
// comm/network_route.h), else to 127.0.0.1 when `loopback_only` (all peers
// are local), else to the address the host name resolves to.
BackendPtr make_gloo(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                     const std::string& interface, bool loopback_only);

// NCCL; throws ConfigError when this build has no CUDA.
BackendPtr make_nccl(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout);

// Tears an NCCL backend's communicators down now. Called for every NCCL
// group before the process exits: left to c10d's destructor, the teardown
// runs after the CUDA driver has shut down and aborts the process (2.x).
// A no-op for other backends and builds.
void release_nccl(const BackendPtr& backend);

// True when this build has CUDA (LibTorch with CUDA, NCCL compiled in).
// Collectives this process has started, on every group: a progress counter
// for bagua run's watch (a rank hung before a collective its peers wait in
// has started fewer).
int64_t collectives_started();
void count_collective_started();

bool cuda_built();
// GPUs visible to this process (0 without CUDA).
int cuda_device_count();
// True when this build has CUDA and a GPU is visible.
bool cuda_available();
// Makes `device` the current CUDA device (no-op without CUDA).
void set_cuda_device(int device);

c10d::ReduceOp to_c10d(ReduceOp op);

// An exception's message without the C++ stack trace c10::Error appends
// (users read "Operation timed out", not frames of libtorch).
inline std::string message_of(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace bagua::comm
