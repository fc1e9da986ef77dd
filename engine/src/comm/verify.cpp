#include "comm/verify.h"

#include <bagua/errors.h>

#include <ATen/ATen.h>

#include <map>
#include <sstream>

namespace bagua::comm {
namespace {

constexpr int kMaxDims = 4;
constexpr int kTensorFields = 3 + kMaxDims;  // dtype, ndim, numel, dims
constexpr int kFields = 3 + 2 * kTensorFields;
constexpr int kSigTag = 0x6a00;
constexpr int kAckTag = 0x6a01;

void put_tensor(int64_t* out, const at::Tensor* t) {
  if (t == nullptr) {
    for (int i = 0; i < kTensorFields; ++i) out[i] = -1;
    return;
  }
  out[0] = static_cast<int64_t>(t->scalar_type());
  out[1] = t->dim();
  out[2] = t->numel();
  for (int i = 0; i < kMaxDims; ++i) out[3 + i] = i < t->dim() ? t->size(i) : -1;
}

std::string describe_fields(const int64_t* f) {
  if (f[0] < 0) return "";
  std::ostringstream out;
  out << dtype_name(static_cast<at::ScalarType>(f[0])) << "[";
  if (f[1] > kMaxDims) {
    out << f[2] << " elements in " << f[1] << " dims";
  } else {
    for (int64_t i = 0; i < f[1]; ++i) out << (i ? ", " : "") << f[3 + i];
  }
  out << "]";
  return out.str();
}

std::string describe_row(const int64_t* row) {
  std::ostringstream out;
  out << collective_name(static_cast<Collective>(row[0]));
  std::string a = describe_fields(row + 3), b = describe_fields(row + 3 + kTensorFields);
  if (!a.empty()) out << " " << a;
  if (!b.empty()) out << " -> " << b;
  if (row[1] >= 0) out << ", root " << row[1];
  if (row[2] >= 0) out << ", op " << to_string(static_cast<ReduceOp>(row[2]));
  return out.str();
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllreduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllgather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAlltoall: return "alltoall";
    case Collective::kSend: return "send/recv";
    case Collective::kBroadcastObject: return "broadcast_object";
  }
  return "unknown collective";
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(type);
  }
}

std::string describe_tensor(const at::Tensor& t) {
  int64_t f[kTensorFields];
  put_tensor(f, &t);
  return describe_fields(f);
}

at::Tensor on_backend_device(const ProcessGroup::Impl& group, const at::Tensor& t) {
  if (group.backend_name != "nccl") return t.is_cuda() ? t.cpu() : t;
  return t.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(group.world->cuda_device)));
}

void verify_signature(ProcessGroup::Impl& group, const Signature& mine) {
  at::Tensor sig = at::empty({kFields}, at::kLong);
  int64_t* s = sig.data_ptr<int64_t>();
  s[0] = static_cast<int64_t>(mine.collective);
  s[1] = mine.root;
  s[2] = mine.op;
  put_tensor(s + 3, mine.first);
  put_tensor(s + 3 + kTensorFields, mine.second);

  int n = static_cast<int>(group.ranks.size());
  at::Tensor all = on_backend_device(group, at::empty({n, kFields}, at::kLong));
  std::vector<at::Tensor> inputs{on_backend_device(group, sig)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < n; ++r) outputs[0].push_back(all[r]);
  std::string what = std::string(collective_name(mine.collective)) + " on " + group.describe();
  try {
    c10d::AllgatherOptions opts;
    opts.timeout = group.world->timeout;
    group.backend->allgather(outputs, inputs, opts)->wait(group.world->timeout);
  } catch (const std::exception& e) {
    throw CommError(what + " failed while checking the ranks' arguments: " + e.what());
  }
  at::Tensor table = all.cpu().contiguous();
  const int64_t* rows = table.data_ptr<int64_t>();
  bool agree = true;
  for (int r = 1; r < n && agree; ++r) {
    agree = std::equal(rows, rows + kFields, rows + r * kFields);
  }
  if (agree) return;
  // Group ranks by identical arguments: "ranks [0, 2]: ...; rank 1: ...".
  std::map<std::string, std::vector<int>> by_args;
  std::vector<std::string> order;
  for (int r = 0; r < n; ++r) {
    std::string d = describe_row(rows + r * kFields);
    if (by_args.find(d) == by_args.end()) order.push_back(d);
    by_args[d].push_back(r);
  }
  std::string message = what + ": the ranks disagree on the collective's arguments: ";
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& ranks = by_args[order[i]];
    message += (i ? "; " : "");
    message += ranks.size() == 1 ? "rank " + std::to_string(ranks[0]) : "ranks " + format_ranks(ranks);
    message += ": " + order[i];
  }
  message += ". Every rank must call the same collectives, in the same order, with the same "
             "dtype, shape, root and op.";
  throw CommError(message);
}

void verify_send(ProcessGroup::Impl& group, const at::Tensor& tensor, int dst) {
  at::Tensor offer = at::tensor({static_cast<int64_t>(tensor.scalar_type()), tensor.numel()}, at::kLong);
  at::Tensor answer = at::empty({3}, at::kLong);
  std::vector<at::Tensor> out{on_backend_device(group, offer)};
  std::vector<at::Tensor> in{on_backend_device(group, answer)};
  std::string what = "send to rank " + std::to_string(dst) + " on " + group.describe();
  try {
    group.backend->send(out, dst, kSigTag)->wait(group.world->timeout);
    group.backend->recv(in, dst, kAckTag)->wait(group.world->timeout);
  } catch (const std::exception& e) {
    throw CommError(what + " failed: " + comm::message_of(e));
  }
  at::Tensor a = in[0].cpu();
  if (a[0].item<int64_t>() == 1) return;
  throw CommError(what + ": the receiver expects " +
                  dtype_name(static_cast<at::ScalarType>(a[1].item<int64_t>())) + " with " +
                  std::to_string(a[2].item<int64_t>()) + " elements, this rank sends " +
                  describe_tensor(tensor));
}

void verify_recv(ProcessGroup::Impl& group, const at::Tensor& tensor, int src) {
  at::Tensor offer = at::empty({2}, at::kLong);
  std::vector<at::Tensor> in{on_backend_device(group, offer)};
  std::string what = "recv from rank " + std::to_string(src) + " on " + group.describe();
  try {
    group.backend->recv(in, src, kSigTag)->wait(group.world->timeout);
  } catch (const std::exception& e) {
    throw CommError(what + " failed: " + comm::message_of(e));
  }
  at::Tensor o = in[0].cpu();
  int64_t their_type = o[0].item<int64_t>(), their_numel = o[1].item<int64_t>();
  bool ok = their_type == static_cast<int64_t>(tensor.scalar_type()) && their_numel == tensor.numel();
  at::Tensor answer = at::tensor({int64_t(ok ? 1 : 0), static_cast<int64_t>(tensor.scalar_type()),
                                  tensor.numel()},
                                 at::kLong);
  std::vector<at::Tensor> out{on_backend_device(group, answer)};
  try {
    group.backend->send(out, src, kAckTag)->wait(group.world->timeout);
  } catch (const std::exception& e) {
    throw CommError(what + " failed: " + comm::message_of(e));
  }
  if (ok) return;
  throw CommError(what + ": the sender sends " +
                  dtype_name(static_cast<at::ScalarType>(their_type)) + " with " +
                  std::to_string(their_numel) + " elements, this rank expects " +
                  describe_tensor(tensor));
}

}  // namespace bagua::comm
