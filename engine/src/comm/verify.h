// Cross-rank check of a collective's arguments: every member contributes a
// small signature (collective, root, op, each tensor's dtype and shape) and
// all members compare all signatures, so disagreement fails on every rank
// with one message instead of hanging or corrupting data.
#pragma once

#include "comm/process_group_impl.h"

#include <ATen/core/Tensor.h>

#include <string>

namespace bagua::comm {

enum class Collective : int64_t {
  kAllreduce = 1,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kSend,
  kBroadcastObject,
};

const char* collective_name(Collective c);

struct Signature {
  Collective collective;
  const at::Tensor* first = nullptr;   // the tensor, or `send`
  const at::Tensor* second = nullptr;  // `recv` where there is one
  int64_t root = -1;                   // root/dst/src, -1 when none
  int64_t op = -1;                     // ReduceOp, -1 when none
};

// "float32", "complex64", ...
std::string dtype_name(at::ScalarType type);
// "float32[2, 3]"
std::string describe_tensor(const at::Tensor& t);

// Allgathers the signature over `group` and throws CommError naming every
// rank's arguments unless they all agree.
void verify_signature(ProcessGroup::Impl& group, const Signature& mine);

// Point to point: the sender offers its tensor's dtype and size, the
// receiver answers whether it matches; both throw CommError when not.
void verify_send(ProcessGroup::Impl& group, const at::Tensor& tensor, int dst);
void verify_recv(ProcessGroup::Impl& group, const at::Tensor& tensor, int src);

// Tensors on the device this group's backend expects (CPU for Gloo).
at::Tensor on_backend_device(const ProcessGroup::Impl& group, const at::Tensor& t);

}  // namespace bagua::comm
