#include "comm/c10d_compat.h"

#include <bagua/errors.h>

#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <cstdlib>
#include <limits>

namespace bagua::comm {

StorePtr make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                        std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.numWorkers = static_cast<std::size_t>(world_size);
  opts.waitWorkers = false;  // we count arrivals ourselves, to name the missing ranks
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

StorePtr make_file_store(const std::string& path) {
  // FileStore's destructor removes the file once `numWorkers` of its
  // objects were destroyed: a count no run reaches keeps it for every
  // client, restarts included.
  return c10::make_intrusive<c10d::FileStore>(path, std::numeric_limits<int>::max());
}

std::string store_file_from_env() {
  const char* path = std::getenv("BAGUA_STORE_FILE");
  return path != nullptr ? std::string(path) : std::string();
}

namespace {
std::atomic<int64_t> g_collectives_started{0};
}  // namespace

int64_t collectives_started() { return g_collectives_started.load(std::memory_order_relaxed); }
void count_collective_started() { g_collectives_started.fetch_add(1, std::memory_order_relaxed); }

StorePtr make_prefix_store(const std::string& prefix, const StorePtr& store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, store);
}

std::string rendezvous_scope() {
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agent_store != nullptr && std::string(agent_store) == "False") return "";
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return "attempt-" + std::string(attempt != nullptr && *attempt != '\0' ? attempt : "0") + "/";
}

BackendPtr make_gloo(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                     const std::string& interface, bool loopback_only) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!interface.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  } else if (loopback_only) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#ifdef USE_C10D_NCCL
BackendPtr make_nccl(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
void release_nccl(const BackendPtr& backend) {
#if TORCH_VERSION_MAJOR >= 2
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(backend.get())) nccl->abort();
#else
  (void)backend;
#endif
}
bool cuda_built() { return true; }
int cuda_device_count() { return at::hasCUDA() ? static_cast<int>(c10::cuda::device_count()) : 0; }
bool cuda_available() { return cuda_device_count() > 0; }
void set_cuda_device(int device) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(device)); }
#else
BackendPtr make_nccl(const StorePtr&, int, int, std::chrono::milliseconds) {
  throw ConfigError(
      "backend 'nccl' needs a CUDA build of bagua (LibTorch with CUDA); this build is CPU-only, "
      "use backend 'gloo'");
}
void release_nccl(const BackendPtr&) {}
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
bool cuda_available() { return false; }
void set_cuda_device(int) {}
#endif

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::PRODUCT: return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case ReduceOp::MIN: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ReduceOp::MAX: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::AVG: return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case ReduceOp::BAND: return c10d::ReduceOp(c10d::ReduceOp::BAND);
    case ReduceOp::BOR: return c10d::ReduceOp(c10d::ReduceOp::BOR);
    case ReduceOp::BXOR: return c10d::ReduceOp(c10d::ReduceOp::BXOR);
  }
  throw InvalidArgument("unknown ReduceOp");
}

}  // namespace bagua::comm

namespace bagua {

LibraryVersions library_versions() {
  LibraryVersions v;
  v.libtorch = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
               std::to_string(TORCH_VERSION_PATCH);
#ifdef BAGUA_WITH_CUDA
  try {
    const long runtime = at::detail::getCUDAHooks().versionCUDART();  // e.g. 12010
    if (runtime > 0) v.cuda = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  } catch (const std::exception&) {
  }
#endif
#ifdef USE_C10D_NCCL
  v.nccl = c10d::getNcclVersion();
#endif
  return v;
}

}  // namespace bagua
