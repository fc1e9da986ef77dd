// Internals shared by process_group.cpp and collectives.cpp.
#pragma once

#include <bagua/communication.h>

#include "comm/c10d_compat.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace bagua::comm {

// What every group of this process shares: the store, the timeout, and where
// each global rank lives (its node and local rank).
struct World {
  StorePtr store;
  // The TCP store rank 0 serves itself (its server on rank 0, a client of
  // it elsewhere), unprefixed; null under a launcher's or a file store.
  StorePtr rank0_store;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  std::vector<int> node_of;        // global rank -> node
  std::vector<int> local_rank_of;  // global rank -> local rank
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string backend;  // the default group's: "gloo" | "nccl"
  int cuda_device = -1;  // this rank's GPU with NCCL (LOCAL_RANK), else -1
  bool verify_default = true;
  bool loopback_only = false;
  std::string gloo_interface;  // GLOO_SOCKET_IFNAME, else the one routing to MASTER_ADDR; "" on loopback
  int next_group_id = 0;  // new_group() calls so far (same on every rank)
  // Every NCCL backend made for this world, released before exit (see
  // comm::release_nccl) and by destroy_process_group().
  std::mutex nccl_mutex;
  std::vector<BackendPtr> nccl_backends;
};

// Releases the NCCL backends of `world` (idempotent).
void release_nccl_backends(World& world);

// Formats "[0, 1, 3]".
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace bagua::comm

namespace bagua {

namespace comm {
// The messages one sender sends this rank with one tag through checked
// isend/irecv (collectives.cpp): their data receives are posted in the
// order of the irecv calls, whichever thread checks each offer first.
struct P2pChannel {
  std::mutex mutex;
  std::condition_variable turn;
  uint64_t issued = 0;  // irecv calls so far
  uint64_t posted = 0;  // of those, settled (data receive posted, or failed)
  std::string broken;   // set by a mismatch: why no later message can be received
};
}  // namespace comm

struct ProcessGroup::Impl {
  std::shared_ptr<comm::World> world;
  comm::BackendPtr backend;  // null when this process is not a member
  std::string backend_name;  // "gloo" | "nccl"
  std::vector<int> ranks;    // global ranks, in group order
  int rank = -1;             // group rank of this process
  std::string prefix;        // store prefix; subgroups extend it
  std::atomic<bool> verify{true};
  int duplicates = 0;  // duplicate() calls so far (same on every member)
  std::atomic<int64_t> bytes_sent{0};  // see ProcessGroup::bytes_sent()

  std::mutex p2p_mutex;
  std::map<std::pair<int, int>, std::shared_ptr<comm::P2pChannel>> p2p_channels;  // by (source rank, tag)

  std::mutex sub_mutex;
  std::shared_ptr<ProcessGroup> intra;  // null: not created yet
  std::shared_ptr<ProcessGroup> inter;
  std::shared_ptr<ProcessGroup> leaders;
  bool intra_is_self = false;
  bool inter_is_self = false;
  bool leaders_is_self = false;

  // "group [0, 1, 2] (rank 1 of 3)" for messages.
  std::string describe() const;
};

namespace comm {
// Creates a group whose members are `ranks` (global); every member must call
// it with the same arguments. Non-members get a group with rank -1.
// `backend` empty: the world's.
std::shared_ptr<ProcessGroup> make_group(const std::shared_ptr<World>& world,
                                         const std::vector<int>& ranks,
                                         const std::string& prefix,
                                         const std::string& backend = "");
// Creates the intra-node, inter-node and node-leader sub-groups of `group`
// (a no-op for non-members); every member calls it at the same point.
void make_sub_groups(ProcessGroup& group);
}  // namespace comm

}  // namespace bagua
