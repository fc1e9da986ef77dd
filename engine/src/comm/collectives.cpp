// The collectives of bagua/communication.h over a group's c10d backend.
//
// Each public function: find the group, check the tensors locally, verify
// the arguments across ranks (unless the group turned that off), check what
// depends on those arguments (root range, op/dtype), then launch. Tensors go
// on the wire as raw bytes for data movement (so every dtype, complex and
// bool included, travels), and in a dtype the backend can reduce for
// reductions (see reduction.h).
#include <bagua/communication.h>
#include <bagua/errors.h>

#include "comm/c10d_compat.h"
#include "comm/process_group_impl.h"
#include "comm/reduction.h"
#include "comm/verify.h"
#include "comm/work.h"

#include <ATen/ATen.h>

#include <cstring>
#include <exception>
#include <thread>

namespace bagua {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return "SUM";
    case ReduceOp::PRODUCT: return "PRODUCT";
    case ReduceOp::MIN: return "MIN";
    case ReduceOp::MAX: return "MAX";
    case ReduceOp::AVG: return "AVG";
    case ReduceOp::BAND: return "BAND";
    case ReduceOp::BOR: return "BOR";
    case ReduceOp::BXOR: return "BXOR";
  }
  return "?";
}

namespace {

using comm::Collective;

constexpr int kDataTag = 0x6a10;

// One collective call: its group (kept alive) and its name for messages.
struct Call {
  ProcessGroupPtr group;
  ProcessGroup::Impl* impl;
  std::string what;

  int size() const { return static_cast<int>(impl->ranks.size()); }
  bool nccl() const { return impl->backend_name == "nccl"; }
  std::chrono::milliseconds timeout() const { return impl->world->timeout; }

  // Wraps a c10d call so its failures carry this call's context.
  template <typename F>
  comm::C10dWorkPtr launch(F&& f) const {
    try {
      return f(*impl->backend);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError(what + " failed: " + comm::message_of(e));
    }
  }

  // Adds `fraction` of `bytes` to the group's bytes_sent().
  void count(int64_t bytes, double fraction) const {
    impl->bytes_sent += static_cast<int64_t>(static_cast<double>(bytes) * fraction + 0.5);
  }
  // The share of the payload a rank sends in most collectives: (n-1)/n.
  double share() const { return size() > 1 ? static_cast<double>(size() - 1) / size() : 0.0; }

  Work work(std::vector<comm::C10dWorkPtr> works, std::function<void()> finish) const {
    return comm::make_work(std::move(works), std::move(finish), what, timeout(), nccl());
  }
};

Call start(const ProcessGroupPtr& group, Collective c) {
  comm::count_collective_started();
  ProcessGroupPtr g = group ? group : default_group();
  Call call{g, &g->impl(), std::string(comm::collective_name(c)) + " on " + g->impl().describe()};
  if (call.impl->rank < 0) {
    throw InvalidArgument(std::string(comm::collective_name(c)) + ": this process (global rank " +
                          std::to_string(call.impl->world->rank) + ") is not a member of " +
                          call.impl->describe());
  }
  return call;
}

void check_tensor(const Call& call, const at::Tensor& t, const char* name) {
  if (!t.defined()) throw InvalidArgument(call.what + ": `" + std::string(name) + "` is an undefined tensor");
  if (t.layout() != at::kStrided) {
    throw InvalidArgument(call.what + ": `" + std::string(name) + "` must be a dense tensor");
  }
  if (!t.is_cpu() && !t.is_cuda()) {
    throw InvalidArgument(call.what + ": `" + std::string(name) + "` is on " + t.device().str() +
                          "; collectives take CPU or CUDA tensors");
  }
  if (call.nccl() && t.is_cuda() && t.device().index() != call.impl->world->cuda_device) {
    throw InvalidArgument(call.what + ": `" + std::string(name) + "` is on " + t.device().str() +
                          " but this rank's NCCL device is cuda:" + std::to_string(call.impl->world->cuda_device));
  }
}

void check_root(const Call& call, int root, const char* name) {
  if (root < 0 || root >= call.size()) {
    throw InvalidArgument(call.what + ": " + name + " " + std::to_string(root) +
                          " is outside the group's ranks [0, " + std::to_string(call.size()) + ")");
  }
}

void verify(const Call& call, Collective c, const at::Tensor* a, const at::Tensor* b = nullptr,
            int root = -1, int op = -1) {
  if (call.impl->verify) comm::verify_signature(*call.impl, {c, a, b, root, op});
}

// The tensor the backend works on: the caller's tensor, or a contiguous
// copy of it, on the backend's side (host memory for Gloo, this rank's GPU
// for NCCL). finish copies it back with copy_back(). `fill` false: the
// contents are not needed (an output), only the storage.
at::Tensor wire_tensor(const Call& call, const at::Tensor& t, bool fill = true) {
  at::Tensor data = t;
  if (call.nccl() && !t.is_cuda()) {
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(call.impl->world->cuda_device));
    data = fill ? t.to(gpu, /*non_blocking=*/false, /*copy=*/true) : at::empty(t.sizes(), t.options().device(gpu));
  } else if (!call.nccl() && t.is_cuda()) {
    // Pinned host memory: the copies back and forth run at full PCIe speed.
    data = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
    if (fill) data.copy_(t);
  }
  return data.is_contiguous() ? data : data.contiguous();
}

// A flat uint8 view of a contiguous tensor's bytes.
at::Tensor as_bytes(const at::Tensor& t) {
  at::Tensor flat = t.reshape({-1});
  if (t.scalar_type() == at::kByte) return flat;
  return flat.view(at::kByte);
}

std::function<void()> copy_back(const at::Tensor& from, const at::Tensor& to,
                                std::function<void()> then = nullptr) {
  bool same = from.is_same(to);
  return [from, to, same, then]() mutable {
    if (then) then();
    if (!same) to.copy_(from);
  };
}

comm::C10dWorkPtr launch_allgather(const Call& call, const at::Tensor& send, const at::Tensor& recv) {
  call.count(send.numel() * send.element_size(), call.size() - 1);
  at::Tensor rows = as_bytes(recv).view({call.size(), -1});
  std::vector<at::Tensor> inputs{as_bytes(send)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < call.size(); ++r) outputs[0].push_back(rows[r]);
  c10d::AllgatherOptions opts;
  opts.timeout = call.timeout();
  return call.launch([&](comm::Backend& b) { return b.allgather(outputs, inputs, opts); });
}

comm::C10dWorkPtr launch_alltoall(const Call& call, const at::Tensor& send, const at::Tensor& recv) {
  call.count(send.numel() * send.element_size(), call.share());
  at::Tensor in = as_bytes(send), out = as_bytes(recv);
  c10d::AllToAllOptions opts;
  opts.timeout = call.timeout();
  std::vector<int64_t> equal_splits;  // empty: equal chunks along dim 0
  return call.launch([&](comm::Backend& b) {
    return b.alltoall_base(out, in, equal_splits, equal_splits, opts);
  });
}

// Gathers every rank's `data` and reduces the rows locally (complex PRODUCT).
Work gather_and_reduce(const Call& call, const at::Tensor& data, const at::Tensor& target,
                       ReduceOp op, bool write) {
  at::Tensor gathered = at::empty({call.size(), data.numel()}, data.options());
  auto w = launch_allgather(call, data, gathered);
  return call.work({w}, [=]() mutable {
    if (write) target.view({-1}).copy_(comm::reduce_rows(gathered, op));
  });
}

}  // namespace

// ---------------------------------------------------------------- allreduce

Work allreduce_async(const at::Tensor& tensor, ReduceOp op, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kAllreduce);
  check_tensor(call, tensor, "tensor");
  verify(call, Collective::kAllreduce, &tensor, nullptr, -1, static_cast<int>(op));
  comm::check_op_supported(op, tensor.scalar_type(), call.what);
  if (tensor.numel() == 0) return call.work({}, nullptr);
  at::Tensor data = wire_tensor(call, tensor);
  if (comm::needs_local_reduction(op, tensor.scalar_type(), call.nccl())) {
    Work w = gather_and_reduce(call, data, data, op, true);
    w.wait();
    copy_back(data, tensor)();
    return call.work({}, nullptr);
  }
  auto plan = comm::plan_wire_reduction(data, op, call.size(), call.nccl());
  std::vector<at::Tensor> tensors{plan.buffer};
  call.count(plan.buffer.numel() * plan.buffer.element_size(), 2 * call.share());
  c10d::AllreduceOptions opts;
  opts.reduceOp = comm::to_c10d(plan.wire_op);
  opts.timeout = call.timeout();
  auto w = call.launch([&](comm::Backend& b) { return b.allreduce(tensors, opts); });
  return call.work({w}, copy_back(data, tensor, plan.finish));
}

void allreduce(const at::Tensor& tensor, ReduceOp op, const ProcessGroupPtr& group) {
  allreduce_async(tensor, op, group).wait();
}

// ---------------------------------------------------------------- broadcast

Work broadcast_async(const at::Tensor& tensor, int root, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kBroadcast);
  check_tensor(call, tensor, "tensor");
  // Only the number of elements must agree (as Bagua documents): a root's
  // [2, 3] may land in another rank's [3, 2], in row-major order.
  const at::Tensor flat_shape = tensor.is_contiguous() ? tensor.view({-1}) : tensor.reshape({-1});
  verify(call, Collective::kBroadcast, &flat_shape, nullptr, root);
  check_root(call, root, "root");
  if (tensor.numel() == 0) return call.work({}, nullptr);
  at::Tensor data = wire_tensor(call, tensor);
  std::vector<at::Tensor> tensors{as_bytes(data)};
  call.count(tensors[0].numel(), call.share());
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = call.timeout();
  auto w = call.launch([&](comm::Backend& b) { return b.broadcast(tensors, opts); });
  return call.work({w}, copy_back(data, tensor));
}

void broadcast(const at::Tensor& tensor, int root, const ProcessGroupPtr& group) {
  broadcast_async(tensor, root, group).wait();
}

// ---------------------------------------------------------------- reduce

Work reduce_async(const at::Tensor& tensor, int dst, ReduceOp op, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kReduce);
  check_tensor(call, tensor, "tensor");
  verify(call, Collective::kReduce, &tensor, nullptr, dst, static_cast<int>(op));
  check_root(call, dst, "dst");
  comm::check_op_supported(op, tensor.scalar_type(), call.what);
  if (tensor.numel() == 0) return call.work({}, nullptr);
  at::Tensor data = wire_tensor(call, tensor);
  if (comm::needs_local_reduction(op, tensor.scalar_type(), call.nccl())) {
    Work w = gather_and_reduce(call, data, data, op, call.impl->rank == dst);
    w.wait();
    copy_back(data, tensor)();
    return call.work({}, nullptr);
  }
  auto plan = comm::plan_wire_reduction(data, op, call.size(), call.nccl());
  std::vector<at::Tensor> tensors{plan.buffer};
  call.count(plan.buffer.numel() * plan.buffer.element_size(), call.share());
  c10d::ReduceOptions opts;
  opts.reduceOp = comm::to_c10d(plan.wire_op);
  opts.rootRank = dst;
  opts.timeout = call.timeout();
  auto w = call.launch([&](comm::Backend& b) { return b.reduce(tensors, opts); });
  return call.work({w}, copy_back(data, tensor, plan.finish));
}

void reduce(const at::Tensor& tensor, int dst, ReduceOp op, const ProcessGroupPtr& group) {
  reduce_async(tensor, dst, op, group).wait();
}

// ---------------------------------------------------------------- allgather

Work allgather_async(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kAllgather);
  check_tensor(call, send, "send");
  check_tensor(call, recv, "recv");
  verify(call, Collective::kAllgather, &send, &recv);
  if (send.scalar_type() != recv.scalar_type() || recv.numel() != send.numel() * call.size()) {
    throw InvalidArgument(call.what + ": `recv` must have the dtype of `send` and size() = " +
                          std::to_string(call.size()) + " times its elements; got send " +
                          comm::describe_tensor(send) + ", recv " + comm::describe_tensor(recv));
  }
  if (send.numel() == 0) return call.work({}, nullptr);
  at::Tensor in = wire_tensor(call, send), out = wire_tensor(call, recv, false);
  auto w = launch_allgather(call, in, out);
  return call.work({w}, copy_back(out, recv));
}

void allgather(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group) {
  allgather_async(send, recv, group).wait();
}

// ---------------------------------------------------------------- reduce_scatter

void reduce_scatter(const at::Tensor& send, const at::Tensor& recv, ReduceOp op,
                    const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kReduceScatter);
  check_tensor(call, send, "send");
  check_tensor(call, recv, "recv");
  verify(call, Collective::kReduceScatter, &send, &recv, -1, static_cast<int>(op));
  if (send.scalar_type() != recv.scalar_type() || send.numel() != recv.numel() * call.size()) {
    throw InvalidArgument(call.what + ": `send` must have the dtype of `recv` and size() = " +
                          std::to_string(call.size()) + " times its elements; got send " +
                          comm::describe_tensor(send) + ", recv " + comm::describe_tensor(recv));
  }
  comm::check_op_supported(op, send.scalar_type(), call.what);
  if (recv.numel() == 0) return;
  // Every rank sends chunk j to rank j, then reduces the chunks it received,
  // in rank order: (n-1)/n of the data crosses the network, as in a ring.
  at::Tensor in = wire_tensor(call, send);
  at::Tensor chunks = at::empty({call.size(), recv.numel()}, in.options());
  call.work({launch_alltoall(call, in, chunks)}, nullptr).wait();
  recv.view({-1}).copy_(comm::reduce_rows(chunks, op));
}

// ---------------------------------------------------------------- alltoall

Work alltoall_async(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kAlltoall);
  check_tensor(call, send, "send");
  check_tensor(call, recv, "recv");
  verify(call, Collective::kAlltoall, &send, &recv);
  if (send.scalar_type() != recv.scalar_type() || send.numel() != recv.numel() ||
      send.numel() % call.size() != 0) {
    throw InvalidArgument(call.what + ": `send` and `recv` must have the same dtype and number of "
                          "elements, divisible by size() = " + std::to_string(call.size()) +
                          "; got send " + comm::describe_tensor(send) + ", recv " +
                          comm::describe_tensor(recv));
  }
  if (send.numel() == 0) return call.work({}, nullptr);
  at::Tensor in = wire_tensor(call, send), out = wire_tensor(call, recv, false);
  auto w = launch_alltoall(call, in, out);
  return call.work({w}, copy_back(out, recv));
}

void alltoall(const at::Tensor& send, const at::Tensor& recv, const ProcessGroupPtr& group) {
  alltoall_async(send, recv, group).wait();
}

// ---------------------------------------------------------------- send / recv

void send(const at::Tensor& tensor, int dst, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kSend);
  check_tensor(call, tensor, "tensor");
  check_root(call, dst, "dst");
  if (dst == call.impl->rank) throw InvalidArgument(call.what + ": a rank cannot send to itself");
  if (call.impl->verify) comm::verify_send(*call.impl, tensor, dst);
  if (tensor.numel() == 0) return;
  std::vector<at::Tensor> tensors{as_bytes(wire_tensor(call, tensor))};
  call.count(tensors[0].numel(), 1.0);
  call.work({call.launch([&](comm::Backend& b) { return b.send(tensors, dst, kDataTag); })}, nullptr)
      .wait();
}

void recv(const at::Tensor& tensor, int src, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kSend);
  check_tensor(call, tensor, "tensor");
  check_root(call, src, "src");
  if (src == call.impl->rank) throw InvalidArgument(call.what + ": a rank cannot receive from itself");
  if (call.impl->verify) comm::verify_recv(*call.impl, tensor, src);
  if (tensor.numel() == 0) return;
  at::Tensor data = wire_tensor(call, tensor);
  std::vector<at::Tensor> tensors{as_bytes(data)};
  call.work({call.launch([&](comm::Backend& b) { return b.recv(tensors, src, kDataTag); })},
            copy_back(data, tensor))
      .wait();
}

// Non-blocking point to point. Data travels on kDataTag + 1 + tag. When
// the group checks its calls (Gloo), the check must not block either: a
// ring exchange posts every irecv and isend before it waits on any, on
// every rank, so a call that waited for its peer's answer would wait
// forever. So the sender posts an offer (dtype, numel) on an offer tag, a
// receive of the answer and the data itself, and looks at the answer in
// wait(). The receiver posts the offer's receive, and a thread of its own
// waits for the offer, answers it, and posts the data's receive only if it
// matches (Gloo aborts the process on a message larger than the receive
// posted for it). The data receives of one sender and tag are posted in
// the order of the irecv calls (P2pChannel), so they match the sends in
// order. NCCL groups do not check isend/irecv.
namespace {

constexpr int kMaxP2pTag = 1 << 20;
constexpr int kOfferTag = 0x6b000000;   // + tag: the sender's offer
constexpr int kAnswerTag = 0x6c000000;  // + tag: the receiver's answer
// The answer's first value: the offer matched the receive, did not, or came
// after an earlier message of this sender and tag failed (its data is not
// received). Answers are sent in the order of the receives, as the sender
// posts its answer receives in the order of its sends: the k-th send gets
// the k-th answer.
constexpr int64_t kAnswerMismatch = 0, kAnswerMatched = 1, kAnswerEarlierFailed = 2;

void check_tag(const Call& call, int tag) {
  if (tag < 0 || tag >= kMaxP2pTag) {
    throw InvalidArgument(call.what + ": tag " + std::to_string(tag) + " is outside [0, " +
                          std::to_string(kMaxP2pTag) + ")");
  }
}

bool checks_p2p(const Call& call) { return call.impl->verify && !call.nccl(); }

std::shared_ptr<comm::P2pChannel> p2p_channel(ProcessGroup::Impl& impl, int src, int tag) {
  std::lock_guard<std::mutex> lock(impl.p2p_mutex);
  auto& channel = impl.p2p_channels[{src, tag}];
  if (!channel) channel = std::make_shared<comm::P2pChannel>();
  return channel;
}

}  // namespace

Work isend(const at::Tensor& tensor, int dst, const ProcessGroupPtr& group, int tag) {
  Call call = start(group, Collective::kSend);
  check_tensor(call, tensor, "tensor");
  check_root(call, dst, "dst");
  check_tag(call, tag);
  if (dst == call.impl->rank) throw InvalidArgument(call.what + ": a rank cannot send to itself");
  const bool checked = checks_p2p(call);
  if (tensor.numel() == 0 && !checked) return call.work({}, nullptr);
  at::Tensor data = wire_tensor(call, tensor);
  std::vector<at::Tensor> tensors{as_bytes(data)};
  call.count(tensors[0].numel(), 1.0);
  if (!checked) {
    auto w = call.launch([&](comm::Backend& b) { return b.send(tensors, dst, kDataTag + 1 + tag); });
    return call.work({w}, [data] {});  // keeps the staged copy alive until done
  }
  std::vector<at::Tensor> offer{at::tensor({static_cast<int64_t>(tensor.scalar_type()), tensor.numel()}, at::kLong)};
  std::vector<at::Tensor> answer{at::zeros({3}, at::kLong)};
  auto offered = call.launch([&](comm::Backend& b) { return b.send(offer, dst, kOfferTag + tag); });
  auto answered = call.launch([&](comm::Backend& b) { return b.recv(answer, dst, kAnswerTag + tag); });
  comm::C10dWorkPtr sent;
  if (tensor.numel() > 0) sent = call.launch([&](comm::Backend& b) { return b.send(tensors, dst, kDataTag + 1 + tag); });
  const std::string what = call.what + ": send to rank " + std::to_string(dst);
  const std::string mine = comm::describe_tensor(tensor);
  const auto timeout = call.timeout();
  return call.work({offered, answered}, [data, offer, answer, sent, what, mine, timeout, tag] {
    const at::Tensor a = answer[0];
    if (a[0].item<int64_t>() == kAnswerEarlierFailed) {
      if (sent) sent->abort();
      throw CommError(what + ": not received, as an earlier message to it with tag " + std::to_string(tag) +
                      " failed there");
    }
    if (a[0].item<int64_t>() != kAnswerMatched) {
      if (sent) sent->abort();
      throw CommError(what + ": the receiver expects " +
                      comm::dtype_name(static_cast<at::ScalarType>(a[1].item<int64_t>())) + " with " +
                      std::to_string(a[2].item<int64_t>()) + " elements, this rank sends " + mine);
    }
    if (!sent) return;
    try {
      sent->wait(timeout);
    } catch (const std::exception& e) {
      throw CommError(what + " failed: " + comm::message_of(e));
    }
  });
}

Work irecv(const at::Tensor& tensor, int src, const ProcessGroupPtr& group, int tag) {
  Call call = start(group, Collective::kSend);
  check_tensor(call, tensor, "tensor");
  check_root(call, src, "src");
  check_tag(call, tag);
  if (src == call.impl->rank) throw InvalidArgument(call.what + ": a rank cannot receive from itself");
  const bool checked = checks_p2p(call);
  if (tensor.numel() == 0 && !checked) return call.work({}, nullptr);
  at::Tensor data = wire_tensor(call, tensor, /*fill=*/false);
  std::vector<at::Tensor> tensors{as_bytes(data)};
  if (!checked) {
    auto w = call.launch([&](comm::Backend& b) { return b.recv(tensors, src, kDataTag + 1 + tag); });
    return call.work({w}, copy_back(data, tensor));
  }
  // The offer's receive is posted here, in call order, so the k-th irecv
  // from src with this tag gets the k-th offer.
  std::vector<at::Tensor> offer{at::zeros({2}, at::kLong)};
  auto offered = call.launch([&](comm::Backend& b) { return b.recv(offer, src, kOfferTag + tag); });
  std::shared_ptr<comm::P2pChannel> channel = p2p_channel(*call.impl, src, tag);
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(channel->mutex);
    ticket = channel->issued++;
  }
  struct Pending {
    std::thread thread;
    comm::C10dWorkPtr received;
    std::exception_ptr error;
  };
  auto pending = std::make_shared<Pending>();
  const std::string what = call.what + ": recv from rank " + std::to_string(src);
  const std::string mine = comm::describe_tensor(tensor);
  const auto timeout = call.timeout();
  const auto type = static_cast<int64_t>(tensor.scalar_type());
  const int64_t numel = tensor.numel();
  pending->thread = std::thread([call, offer, offered, channel, ticket, pending, tensors, what, mine, timeout, type,
                                 numel, src, tag]() mutable {
    std::string failure;
    bool matched = false, arrived = false;
    try {
      offered->wait(timeout);
      arrived = true;
      const at::Tensor o = offer[0];
      const int64_t their_type = o[0].item<int64_t>(), their_numel = o[1].item<int64_t>();
      matched = their_type == type && their_numel == numel;
      if (!matched) {
        failure = what + ": the sender sends " + comm::dtype_name(static_cast<at::ScalarType>(their_type)) +
                  " with " + std::to_string(their_numel) + " elements, this rank expects " + mine;
      }
    } catch (const std::exception& e) {
      failure = what + " failed: " + comm::message_of(e);
    }
    // In turn: answer the offer and post the data's receive (or fail, and
    // fail the later ones).
    std::unique_lock<std::mutex> lock(channel->mutex);
    if (!channel->turn.wait_for(lock, timeout, [&] { return channel->posted == ticket; })) {
      pending->error = std::make_exception_ptr(CommError(what + ": timed out behind an earlier receive"));
      return;
    }
    try {
      const bool earlier_failed = !channel->broken.empty();
      if (arrived) {
        const int64_t code = earlier_failed ? kAnswerEarlierFailed : matched ? kAnswerMatched : kAnswerMismatch;
        std::vector<at::Tensor> answer{at::tensor({code, type, numel}, at::kLong)};
        call.launch([&](comm::Backend& b) { return b.send(answer, src, kAnswerTag + tag); })->wait(timeout);
      }
      if (earlier_failed) {
        failure = what + ": not received, as an earlier message from rank " + std::to_string(src) +
                  " with tag " + std::to_string(tag) + " failed (" + channel->broken + ")";
      } else if (!failure.empty()) {
        channel->broken = failure;
      } else if (numel > 0) {
        pending->received = call.launch([&](comm::Backend& b) { return b.recv(tensors, src, kDataTag + 1 + tag); });
      }
    } catch (const std::exception& e) {
      failure = what + " failed: " + comm::message_of(e);
      channel->broken = failure;
    }
    ++channel->posted;
    channel->turn.notify_all();
    if (!failure.empty()) pending->error = std::make_exception_ptr(CommError(failure));
  });
  std::function<void()> copy = copy_back(data, tensor);
  return call.work({}, [pending, data, copy, what, timeout] {
    if (pending->thread.joinable()) pending->thread.join();
    if (pending->error) std::rethrow_exception(pending->error);
    if (pending->received) {
      try {
        pending->received->wait(timeout);
      } catch (const std::exception& e) {
        throw CommError(what + " failed: " + comm::message_of(e));
      }
    }
    if (copy) copy();
  });
}

// ---------------------------------------------------------------- barrier

void barrier(const ProcessGroupPtr& group) {
  ProcessGroupPtr g = group ? group : default_group();
  Call call{g, &g->impl(), "barrier on " + g->impl().describe()};
  if (call.impl->rank < 0) throw InvalidArgument(call.what + ": this process is not a member");
  c10d::BarrierOptions opts;
  opts.timeout = call.timeout();
  call.work({call.launch([&](comm::Backend& b) { return b.barrier(opts); })}, nullptr).wait();
}

// ---------------------------------------------------------------- broadcast_object

void broadcast_object(std::string& object, int root, const ProcessGroupPtr& group) {
  Call call = start(group, Collective::kBroadcastObject);
  verify(call, Collective::kBroadcastObject, nullptr, nullptr, root);
  check_root(call, root, "root");
  auto bcast = [&](at::Tensor t) {
    std::vector<at::Tensor> tensors{comm::on_backend_device(*call.impl, t)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = call.timeout();
    call.work({call.launch([&](comm::Backend& b) { return b.broadcast(tensors, opts); })}, nullptr)
        .wait();
    return tensors[0].cpu();
  };
  at::Tensor length = at::tensor({static_cast<int64_t>(object.size())}, at::kLong);
  int64_t n = bcast(length)[0].item<int64_t>();
  if (n == 0) {
    object.clear();
    return;
  }
  at::Tensor bytes = at::empty({n}, at::kByte);
  if (call.impl->rank == root) std::memcpy(bytes.data_ptr<uint8_t>(), object.data(), n);
  at::Tensor got = bcast(bytes).contiguous();
  object.assign(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()), n);
}

}  // namespace bagua
