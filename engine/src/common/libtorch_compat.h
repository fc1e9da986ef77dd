// Every difference between the LibTorch versions bagua builds against lives
// here (and, for c10d's process-group factories, in comm/c10d_compat.cpp):
// Debian's LibTorch 1.13 (CPU) and the LibTorch 2.x inside a PyTorch CUDA
// wheel. The rest of the code uses these names and never tests versions.
//
// 1. c10d: in 1.13 ProcessGroupGloo/NCCL derive from c10d::ProcessGroup; in
//    2.x from c10d::Backend (ProcessGroup became a dispatcher over backends).
//    Both expose the same collective methods: `comm::Backend` names the base.
// 2. Optimizer state: 1.13 keys Optimizer::state() by the parameter's
//    TensorImpl address printed as a string (c10::guts::to_string), 2.x by
//    the address itself (void*); c10::guts::to_string is gone in 2.x.
//    optimizer_state_key() gives the key of either.
// 3. Build, not code: the wheel ships no Gloo headers, though
//    ProcessGroupGloo.hpp includes them; a CUDA build takes them from
//    Debian's libgloo-dev (scripts/install-deps.sh), like the CPU build.
//    Only bagua's own calls into ProcessGroupGloo use them (no Gloo object
//    is laid out in bagua's code), so the header version does not matter.
// 4. The PyTorch wheel's libtorch.so exports its own copy of
//    std::filesystem::remove_all, which the dynamic linker binds ahead of
//    libstdc++'s; removing a non-empty directory through it jumps to a null
//    pointer (seen with torch 2.11 on Ubuntu 24.04). bagua never calls
//    std::filesystem::remove_all: compat::remove_all() walks the tree with
//    POSIX nftw instead.
// 5. The wheel's LibTorch enables CMake's CUDA language and its -gencode
//    flags itself (CMakeLists.txt); nccl.h comes from the wheel's nvidia-nccl
//    package (engine/CMakeLists.txt).
// 6. c10::Allocator::allocate(size_t) is const in 1.13 and non-const in the
//    2.x the CUDA build uses (2.11 seen). An allocator of bagua's defines
//    both, through BAGUA_ALLOCATOR_ALLOCATE(n): the one the base declares
//    virtual is the override, the other an overload nothing calls. No
//    version test, so no 2.x release in between can be guessed wrong.
// 7. c10::Allocator::copy_data is pure virtual in 2.x and absent in 1.13:
//    defined without `override`.
// 8. Autocast: 1.13 has one switch and one dtype per device family
//    (at::autocast::set_enabled / set_autocast_gpu_dtype for CUDA,
//    set_cpu_enabled / set_autocast_cpu_dtype for the CPU); 2.4 added
//    is_autocast_enabled(device) / set_autocast_enabled(device, on) /
//    set_autocast_dtype(device, dtype) and deprecated the old ones, which
//    then print a deprecation warning at every call. autocast_enabled(),
//    set_autocast() take the device type and call whichever the version has.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorImpl.h>

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <system_error>
#include <string>
#include <type_traits>

// Inside a class derived from c10::Allocator whose member
// `c10::DataPtr IMPL(size_t n) const` does the work (item 6).
#define BAGUA_ALLOCATOR_ALLOCATE(impl)                                   \
  c10::DataPtr allocate(size_t n) const { return impl(n); }              \
  c10::DataPtr allocate(size_t n) { return impl(n); }

namespace bagua::compat {

#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

// The key of `param`'s entry in an optimizer's state() map (`Map` is that
// map's type: ska::flat_hash_map<std::string or void*, ...>).
template <typename Map>
typename Map::key_type optimizer_state_key(const at::TensorImpl* param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << param;  // what c10::guts::to_string printed
    return s.str();
  } else {
    return const_cast<at::TensorImpl*>(param);
  }
}

// Whether autocast is on for `device` (CPU or CUDA) on this thread (item 8;
// train/autocast_compat.cpp, which alone includes ATen/autocast_mode.h).
bool autocast_enabled(c10::DeviceType device);

// Autocast on or off for `device` (CPU or CUDA) on this thread, in `dtype`
// when on (item 8).
void set_autocast(c10::DeviceType device, bool on, c10::ScalarType dtype);

// Removes `path` and, for a directory, everything under it (symbolic links
// are removed, not followed). A missing path is not an error. Sets `ec` to
// the first failure, as std::filesystem::remove_all does (see note 4).
inline void remove_all(const std::filesystem::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::generic_category());
    return;
  }
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) -> int {
    return std::remove(p) == 0 ? 0 : errno;
  };
  int rc = ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) ec = std::error_code(rc > 0 ? rc : errno, std::generic_category());
}

// The throwing form: std::filesystem::filesystem_error naming the path.
inline void remove_all(const std::filesystem::path& path) {
  std::error_code ec;
  bagua::compat::remove_all(path, ec);
  if (ec) throw std::filesystem::filesystem_error("cannot remove", path, ec);
}

}  // namespace bagua::compat
