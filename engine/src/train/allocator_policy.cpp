#include "train/allocator_policy.h"

#include <malloc.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>

namespace bagua::train {

std::string apply_allocator_policy(bool tuned) {
  if (!tuned) return "system (train.allocator)";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* var = *e;
    const bool malloc_var = std::strncmp(var, "MALLOC_", 7) == 0;
    const bool tunables = std::strncmp(var, "GLIBC_TUNABLES=", 15) == 0 && std::strstr(var, "glibc.malloc") != nullptr;
    const bool preload = std::strncmp(var, "LD_PRELOAD=", 11) == 0 && var[11] != '\0';
    if (malloc_var || tunables || preload) {
      const char* eq = std::strchr(var, '=');
      return "left as set by " + std::string(var, eq ? static_cast<size_t>(eq - var) : std::strlen(var));
    }
  }
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  // One arena for every thread. A thread's own arena grows in heaps of at
  // most 64 MiB, and glibc serves a larger block there with a fresh mmap
  // whatever M_MMAP_MAX says, unmapped again on free: a model-sized buffer
  // made on the communication thread or Gloo's (c10d's allgather output,
  // for one) page-faulted in every step (decentralized on a 20 M-parameter
  // model: 17,000 faults a step).
  mallopt(M_ARENA_MAX, 1);
  return "tuned";
}

}  // namespace bagua::train
