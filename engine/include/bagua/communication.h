// Collective communication: process groups and collectives over c10d.
//
// Mirrors bagua.torch_api.communication. init_process_group() reads
// torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), meets its peers through a c10d TCPStore at
// MASTER_ADDR:MASTER_PORT, and creates the default group over Gloo (TCP) or
// NCCL (CUDA builds only, one GPU per rank).
//
// Tensors may live on the CPU or on a CUDA device with either backend. A
// tensor on the other side of the backend (a CUDA tensor on Gloo, a CPU
// tensor on NCCL) is staged: copied to the backend's side, communicated,
// and copied back when the Work completes, which costs two copies per call.
// On NCCL a CUDA tensor must be on this rank's current device.
//
// Every collective works in place, like Bagua's and torch.distributed's, and
// must be called by every member of the group in the same order. Ranks given
// to a collective (root, dst, src) are ranks *within the group*.
//
// Unless a group's verification is turned off, each collective first
// exchanges a small signature (collective, dtype, shape, root, op) among the
// members, so ranks that disagree get a CommError naming every rank's
// arguments on every rank, instead of a hang or silently wrong data. A peer
// that never arrives, or dies, turns into a CommError after the timeout.
#pragma once

#include <bagua/errors.h>

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace bagua {

// Element-wise reductions. Not every op is defined on every dtype: bitwise
// ops need integral or bool tensors, MIN/MAX/bitwise ops are undefined on
// complex tensors; such calls throw InvalidArgument. AVG is SUM then divide
// by the group size (on integral tensors: truncated toward zero, the sum
// taken in int64 so it does not overflow a narrow dtype).
enum class ReduceOp { SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR };

// "SUM", "PRODUCT", ...
const char* to_string(ReduceOp op);

// Settings of init_process_group().
struct InitOptions {
  // How long a rendezvous or a collective may wait for a peer before it
  // fails with CommError. BAGUA_TIMEOUT_S in the environment overrides it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // "auto", "gloo" or "nccl". auto is NCCL when every rank has a GPU of its
  // own (a CUDA build, and LOCAL_WORLD_SIZE no more than the GPUs visible on
  // every node), else Gloo; the ranks agree on it through the store. NCCL
  // cannot put two ranks on one GPU. BAGUA_BACKEND in the environment
  // overrides it. With NCCL, each rank's current CUDA device becomes
  // LOCAL_RANK.
  std::string backend = "auto";
  // Whether groups check every collective's arguments across ranks (see the
  // file comment). BAGUA_VERIFY_COLLECTIVES=0 in the environment turns it off.
  bool verify_collectives = true;
};

// Handle of an asynchronous collective. wait() blocks until it is done and
// the result is in the tensor (it rethrows a failure as CommError); calling
// it again is a no-op. A Work that is destroyed without wait() waits. On an
// NCCL group, as in PyTorch, "done" is in stream order: wait() makes the
// current CUDA stream wait for the collective and returns without blocking
// the host, so work queued after it (and any read of the tensor, which
// synchronises) sees the result.
class Work {
 public:
  Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  void wait();
  // True once wait() would not block.
  bool is_completed();

  struct State;
  explicit Work(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// A set of ranks that communicate together (Bagua's BaguaProcessGroup).
class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  // This process's rank in the group, or -1 when it is not a member.
  int rank() const;
  // Number of members.
  int size() const;
  bool is_member() const { return rank() >= 0; }
  // Global ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const;
  // "gloo" or "nccl".
  std::string backend() const;

  // The members of this group that share this process's node, in group
  // order. Created with the group; the same object as this group when all
  // members are on one node.
  std::shared_ptr<ProcessGroup> intra_node_group();
  // The members of this group with this process's local rank (one per
  // node), in group order; with one node it is a group of one. Created with
  // the group, like intra_node_group().
  std::shared_ptr<ProcessGroup> inter_node_group();

  // The first member (in group order) of each node's members of this group,
  // in group order: the ranks that talk across nodes in hierarchical
  // algorithms. Created with the group; on other ranks a non-member group.
  std::shared_ptr<ProcessGroup> node_leaders_group();

  // A new group with the same members, in the same order, over its own
  // connections (and its own sub-groups), so its traffic never interleaves
  // with this group's. Collective over the members: every member calls it,
  // the same number of times. Non-members get a non-member group.
  // `backend` ("gloo" or "nccl"; empty: this group's) lets a GPU job keep
  // small control traffic on CPU tensors over Gloo beside an NCCL group.
  std::shared_ptr<ProcessGroup> duplicate(const std::string& backend = "");

  // Bytes this rank has sent through this group and its sub-groups, by the
  // collectives' payload (not the argument checks): for a tensor of N bytes
  // on the wire in a group of n, allreduce 2(n-1)/n N (a ring's share),
  // reduce, broadcast, alltoall and reduce_scatter (n-1)/n N, allgather
  // (n-1) N of its input, send N. A counter, not an estimate of time: what
  // an algorithm puts on the network.
  int64_t bytes_sent() const;

  // Turns the cross-rank check of each collective's arguments on or off for
  // this group and the sub-groups made from it (all members must agree). Off saves one small collective per
  // call; use it on hot paths whose arguments are identical by construction.
  void set_verify_collectives(bool on);
  bool verify_collectives() const;

  struct Impl;
  explicit ProcessGroup(std::shared_ptr<Impl> impl);
  Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// Joins the default group. Throws RepeatedInitializationError when already
// initialized, ConfigError naming the variable when the environment is
// missing or malformed, CommError when the peers do not all arrive within
// the timeout (naming the missing ranks).
void init_process_group(const InitOptions& options = {});
bool is_initialized();
// Leaves every group and closes the connections; init_process_group() may
// then be called again (every rank calls both as often as the others).
// Collective when rank 0 serves the store itself (no launcher's store):
// every rank waits until all have called it and rank 0's store is closed,
// so that none joins again while the old store still listens. A group
// handle kept across it (new_group(), default_group(), ...) keeps rank 0's
// store, and its port: release them first (joining again says so). The
// other ranks then return at once (rank 0 says its store stays up).
void destroy_process_group();

ProcessGroupPtr default_group();
int get_rank();
int get_world_size();
int get_local_rank();
int get_local_size();
// This process's node index (GROUP_RANK, else derived from RANK/LOCAL_RANK).
int get_node_rank();

// Creates a group of the given global ranks (unique, in range, any order:
// the order given is the group-rank order). Like torch.distributed.new_group,
// every process of the default group must call it, with the same ranks, in
// the same order relative to other new_group calls. Non-members get a group
// with rank() == -1, on which collectives throw InvalidArgument.
ProcessGroupPtr new_group(const std::vector<int>& ranks);

// --- Collectives. group == nullptr means the default group. ---

// Reduces `tensor` across the group; every member ends with the result.
void allreduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::SUM,
               const ProcessGroupPtr& group = nullptr);
Work allreduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::SUM,
                     const ProcessGroupPtr& group = nullptr);

// Copies root's `tensor` into every member's `tensor`.
void broadcast(const at::Tensor& tensor, int root = 0, const ProcessGroupPtr& group = nullptr);
Work broadcast_async(const at::Tensor& tensor, int root = 0, const ProcessGroupPtr& group = nullptr);

// Reduces `tensor` into rank `dst`'s `tensor`; on the other ranks `tensor`
// is left with unspecified contents.
void reduce(const at::Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM,
            const ProcessGroupPtr& group = nullptr);
Work reduce_async(const at::Tensor& tensor, int dst, ReduceOp op = ReduceOp::SUM,
                  const ProcessGroupPtr& group = nullptr);

// `recv` (size() times as many elements as `send`, same dtype) receives every
// member's `send`, concatenated in group-rank order.
void allgather(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group = nullptr);
Work allgather_async(const at::Tensor& send, const at::Tensor& recv,
                     const ProcessGroupPtr& group = nullptr);

// `send` holds size() equal chunks; group rank i's `recv` (one chunk's worth)
// receives the reduction over all members of their chunk i.
void reduce_scatter(const at::Tensor& send, const at::Tensor& recv, ReduceOp op = ReduceOp::SUM,
                    const ProcessGroupPtr& group = nullptr);

// `send` holds size() equal chunks; chunk j goes to group rank j, and `recv`'s
// chunk i (same size) receives group rank i's chunk for this rank.
void alltoall(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group = nullptr);
Work alltoall_async(const at::Tensor& send, const at::Tensor& recv,
                    const ProcessGroupPtr& group = nullptr);

// Point to point: `dst`/`src` are group ranks; tensors must match in dtype and
// element count on both sides.
void send(const at::Tensor& tensor, int dst, const ProcessGroupPtr& group = nullptr);
void recv(const at::Tensor& tensor, int src, const ProcessGroupPtr& group = nullptr);
// Non-blocking point to point (torch's isend/irecv): several may be in
// flight at once, e.g. a ring exchange with both neighbours, posted in any
// order on every rank before any is waited (no call waits for its peer).
// Messages from one sender with one `tag` (in [0, 2^20)) are received in
// the order they were sent. The tensors must stay alive until the Work is
// waited. With the argument check on (Gloo), a dtype or size mismatch
// fails wait() on both sides with CommError (docs/communication.md).
Work isend(const at::Tensor& tensor, int dst, const ProcessGroupPtr& group = nullptr, int tag = 0);
Work irecv(const at::Tensor& tensor, int src, const ProcessGroupPtr& group = nullptr, int tag = 0);

// Blocks until every member has reached it.
void barrier(const ProcessGroupPtr& group = nullptr);

// Copies root's string into every member's `object` (any bytes: serialize
// your object first).
void broadcast_object(std::string& object, int root = 0, const ProcessGroupPtr& group = nullptr);

// The libraries bagua runs on, for provenance.json: LibTorch's version, and
// CUDA's runtime and NCCL's when built with them ("none" otherwise).
struct LibraryVersions {
  std::string libtorch;
  std::string cuda = "none";
  std::string nccl = "none";
};
LibraryVersions library_versions();

}  // namespace bagua
