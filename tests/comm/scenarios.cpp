// Worker-side scenarios of the communication tests. Each runs in every rank
// of a real multi-process group (real sockets through Gloo) and checks exact
// values against a reference computed independently of the library: a plain
// element-wise fold over every rank's input, which each rank can rebuild.
#include "support/worker_checks.h"

#include <bagua/communication.h>
#include <bagua/errors.h>

#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <thread>

using bagua::ReduceOp;
using bagua::testing::WorkerChecks;

namespace {

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kDouble, at::kLong, at::kShort, at::kByte,
                                             at::kComplexFloat};
const std::vector<ReduceOp> kOps = {ReduceOp::SUM, ReduceOp::PRODUCT, ReduceOp::MIN, ReduceOp::MAX,
                                    ReduceOp::AVG, ReduceOp::BAND,    ReduceOp::BOR, ReduceOp::BXOR};

std::string name(at::ScalarType t) { return c10::toString(t); }

// Where the collectives scenario's tensors live: BAGUA_TEST_DEVICE=cuda puts
// them on a GPU (this rank's with NCCL, else GPU 0: ranks may share one),
// so the same exact checks run on CUDA tensors.
at::Device test_device() {
  static const at::Device device = [] {
    const char* d = std::getenv("BAGUA_TEST_DEVICE");
    if (d == nullptr || std::string(d) != "cuda") return at::Device(at::kCPU);
    bool nccl = bagua::is_initialized() && bagua::default_group()->backend() == "nccl";
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(nccl ? bagua::get_local_rank() : 0));
  }();
  return device;
}

bool op_defined(ReduceOp op, at::ScalarType t) {
  bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  if (at::isComplexType(t)) return op == ReduceOp::SUM || op == ReduceOp::AVG || op == ReduceOp::PRODUCT;
  if (at::isFloatingType(t)) return !bitwise;
  return true;
}

// Rank r's input: small integers 1..5 (and an imaginary part for complex),
// so sums and products stay exact in every dtype, and uint8 wraps the same
// way in the reference as on the wire.
at::Tensor input_of(int r, at::ScalarType t, int64_t n = 6) {
  std::vector<double> re(n), im(n);
  for (int64_t i = 0; i < n; ++i) {
    re[i] = static_cast<double>((r * 3 + i * 7) % 5 + 1);
    im[i] = static_cast<double>((r + 2 * i) % 3);
  }
  at::Tensor real = at::tensor(re, at::kDouble);
  if (at::isComplexType(t)) return at::complex(real, at::tensor(im, at::kDouble)).to(t).to(test_device());
  return real.to(t).to(test_device());
}

// The reference: fold every rank's input with plain element-wise ops, on
// the CPU whatever device the inputs are on.
at::Tensor reference(ReduceOp op, int world, const std::function<at::Tensor(int)>& in_any) {
  auto in = [&](int r) { return in_any(r).cpu(); };
  at::Tensor acc = in(0).clone();
  for (int r = 1; r < world; ++r) {
    at::Tensor x = in(r);
    switch (op) {
      case ReduceOp::SUM: case ReduceOp::AVG: acc = acc + x; break;
      case ReduceOp::PRODUCT: acc = acc * x; break;
      case ReduceOp::MIN: acc = at::minimum(acc, x); break;
      case ReduceOp::MAX: acc = at::maximum(acc, x); break;
      case ReduceOp::BAND: acc = at::bitwise_and(acc, x); break;
      case ReduceOp::BOR: acc = at::bitwise_or(acc, x); break;
      case ReduceOp::BXOR: acc = at::bitwise_xor(acc, x); break;
    }
  }
  if (op == ReduceOp::AVG) {
    if (at::isIntegralType(acc.scalar_type(), false)) {
      // Sum in int64 (no uint8 wrap-around), then truncate.
      at::Tensor wide = in(0).to(at::kLong);
      for (int r = 1; r < world; ++r) wide = wide + in(r).to(at::kLong);
      acc = at::div(wide, world, "trunc").to(acc.scalar_type());
    } else {
      acc = acc / world;
    }
  }
  return acc.to(in(0).scalar_type());
}

// Exact, except AVG on floating types, whose division may round differently
// on a GPU (CUDA multiplies by the reciprocal): within an ulp or two there.
void expect_reduced(WorkerChecks& c, const at::Tensor& got, const at::Tensor& want, ReduceOp op,
                    const std::string& what) {
  at::ScalarType t = want.scalar_type();
  if (op == ReduceOp::AVG && (at::isFloatingType(t) || at::isComplexType(t))) {
    c.expect_close(got, want, t == at::kDouble || t == at::kComplexDouble ? 1e-14 : 1e-6, what);
  } else {
    c.expect_equal(got, want, what);
  }
}

void check_allreduce(WorkerChecks& c, int rank, int world) {
  for (auto t : kDtypes) {
    for (auto op : kOps) {
      std::string what = "allreduce " + name(t) + " " + bagua::to_string(op);
      at::Tensor x = input_of(rank, t);
      if (!op_defined(op, t)) {
        c.expect_throws<bagua::InvalidArgument>([&] { bagua::allreduce(x, op); }, "not defined", what);
        continue;
      }
      bagua::allreduce(x, op);
      expect_reduced(c, x, reference(op, world, [&](int r) { return input_of(r, t); }), op, what);
    }
  }
  // Bagua's documented examples (exact literals at world size 2).
  at::Tensor ints = at::arange(2, at::kLong) + 1 + 2 * rank;
  bagua::allreduce(ints);
  // torch.tensor([1+1j, 2+2j], dtype=torch.cfloat) + 2 * rank * (1+1j)
  auto complex_of = [](std::vector<float> re_im) {
    return at::view_as_complex(at::tensor(re_im, at::kFloat).view({-1, 2})).clone();
  };
  float shift = 2.0f * rank;
  at::Tensor cplx = complex_of({1, 1, 2, 2}) + complex_of({shift, shift, shift, shift});
  bagua::allreduce(cplx);
  if (world == 2) {
    c.expect_equal(ints, at::tensor({4, 6}, at::kLong), "documented int64 example");
    c.expect_equal(cplx, complex_of({4, 4, 6, 6}), "documented complex example");
  }
  // Non-contiguous input: a transposed view is reduced and written back.
  at::Tensor base = input_of(rank, at::kFloat, 6).view({2, 3});
  at::Tensor view = base.t();
  bagua::allreduce(view, ReduceOp::MAX);
  at::Tensor want = reference(ReduceOp::MAX, world, [&](int r) { return input_of(r, at::kFloat, 6); });
  c.expect_equal(base, want.view({2, 3}), "allreduce of a transposed view writes through");
  // What a training loop passes: a parameter's grad() (a const reference)
  // and a temporary view, both reduced in place through their storage.
  at::Tensor param = at::zeros({4}, at::kFloat).requires_grad_();
  param.mutable_grad() = input_of(rank, at::kFloat, 4);
  bagua::allreduce(param.grad());
  c.expect_equal(param.grad(), reference(ReduceOp::SUM, world, [&](int r) { return input_of(r, at::kFloat, 4); }),
                 "allreduce of a parameter's grad()");
  at::Tensor flat = input_of(rank, at::kFloat, 6);
  bagua::broadcast(flat.view({2, 3}).t(), 0);
  c.expect_equal(flat, input_of(0, at::kFloat, 6), "broadcast into a temporary view");
  // Asynchronous: three in flight, then waited.
  std::vector<at::Tensor> xs;
  std::vector<bagua::Work> works;
  for (int k = 0; k < 3; ++k) xs.push_back(input_of(rank + k, at::kDouble));
  for (auto& x : xs) works.push_back(bagua::allreduce_async(x, ReduceOp::SUM));
  for (auto& w : works) w.wait();
  for (int k = 0; k < 3; ++k) {
    c.expect_equal(xs[k], reference(ReduceOp::SUM, world, [&](int r) { return input_of(r + k, at::kDouble); }),
                   "allreduce_async #" + std::to_string(k));
  }
}

void check_broadcast_reduce(WorkerChecks& c, int rank, int world) {
  for (auto t : kDtypes) {
    for (int root = 0; root < world; ++root) {
      at::Tensor x = input_of(rank, t);
      bagua::broadcast(x, root);
      c.expect_equal(x, input_of(root, t), "broadcast " + name(t) + " from " + std::to_string(root));
    }
    for (auto op : kOps) {
      if (!op_defined(op, t)) continue;
      int dst = (static_cast<int>(op) + 1) % world;
      at::Tensor x = input_of(rank, t);
      bagua::reduce(x, dst, op);
      if (rank == dst) {
        expect_reduced(c, x, reference(op, world, [&](int r) { return input_of(r, t); }), op,
                       "reduce " + name(t) + " " + bagua::to_string(op) + " to " + std::to_string(dst));
      }
    }
  }
  // Only the element count must match (Bagua's documentation): the root's
  // values fill another rank's tensor of another shape in row-major order.
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {3, 2}, {6}, {1, 6}};
  at::Tensor shaped = input_of(rank, at::kFloat).view(shapes[rank % shapes.size()]).clone();
  bagua::broadcast(shaped, 0);
  c.expect_equal(shaped.reshape({-1}), input_of(0, at::kFloat), "broadcast into another shape of as many elements");
  at::Tensor async = input_of(rank, at::kLong);
  bagua::broadcast_async(async, world - 1).wait();
  c.expect_equal(async, input_of(world - 1, at::kLong), "broadcast_async");
}

void check_gather_scatter(WorkerChecks& c, int rank, int world) {
  for (auto t : kDtypes) {
    at::Tensor send = input_of(rank, t, 4);
    at::Tensor recv = at::zeros({world, 4}, send.options());
    bagua::allgather(send, recv);
    std::vector<at::Tensor> rows;
    for (int r = 0; r < world; ++r) rows.push_back(input_of(r, t, 4));
    c.expect_equal(recv, at::stack(rows), "allgather " + name(t));

    // alltoall: chunk j of rank i's send lands in chunk i of rank j's recv.
    at::Tensor a_send = input_of(rank, t, 2 * world);
    at::Tensor a_recv = at::zeros_like(a_send);
    bagua::alltoall(a_send, a_recv);
    std::vector<at::Tensor> chunks;
    for (int r = 0; r < world; ++r) chunks.push_back(input_of(r, t, 2 * world).narrow(0, 2 * rank, 2));
    c.expect_equal(a_recv, at::cat(chunks), "alltoall " + name(t));

    for (auto op : kOps) {
      if (!op_defined(op, t)) continue;
      at::Tensor s = input_of(rank, t, 3 * world);
      at::Tensor out = at::zeros({3}, s.options());
      bagua::reduce_scatter(s, out, op);
      at::Tensor want = reference(op, world, [&](int r) { return input_of(r, t, 3 * world); });
      expect_reduced(c, out, want.narrow(0, 3 * rank, 3), op,
                     "reduce_scatter " + name(t) + " " + bagua::to_string(op));
    }
  }
}

void check_p2p_and_objects(WorkerChecks& c, int rank, int world) {
  if (world > 1) {
    // A ring: send to the next rank, receive from the previous one. Even
    // ranks send first so the blocking calls cannot all wait on each other.
    int next = (rank + 1) % world, prev = (rank + world - 1) % world;
    at::Tensor out = input_of(rank, at::kComplexFloat), in = at::zeros_like(out);
    if (rank % 2 == 0) {
      bagua::send(out, next);
      bagua::recv(in, prev);
    } else {
      bagua::recv(in, prev);
      bagua::send(out, next);
    }
    c.expect_equal(in, input_of(prev, at::kComplexFloat), "send/recv ring");
  }
  for (int root = 0; root < world; ++root) {
    std::string obj = rank == root ? std::string("recipe from rank ") + std::to_string(root) + '\0' + "bin"
                                   : std::string("stale");
    bagua::broadcast_object(obj, root);
    c.expect(obj == std::string("recipe from rank ") + std::to_string(root) + '\0' + "bin",
             "broadcast_object from " + std::to_string(root) + " got '" + obj + "'");
  }
  std::string empty = rank == 0 ? "" : "not empty";
  bagua::broadcast_object(empty, 0);
  c.expect(empty.empty(), "broadcast_object of an empty string");
  bagua::barrier();
  c.expect(true, "barrier");
}

int scenario_collectives() {
  bagua::init_process_group();
  int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  c.expect(bagua::default_group()->size() == world, "default group size");
  if (const char* want = std::getenv("BAGUA_TEST_EXPECT_BACKEND")) {
    c.expect(bagua::default_group()->backend() == want,
             "backend is " + bagua::default_group()->backend() + ", expected " + want);
  }
  c.expect(input_of(rank, at::kFloat).device() == test_device(), "inputs on " + test_device().str());
  check_allreduce(c, rank, world);
  check_broadcast_reduce(c, rank, world);
  check_gather_scatter(c, rank, world);
  check_p2p_and_objects(c, rank, world);
  return c.finish();
}

// Membership of sub-groups with the layout the launcher gave us (e.g. two
// simulated nodes of two ranks each), and collectives on them.
int scenario_groups() {
  bagua::init_process_group();
  int rank = bagua::get_rank(), world = bagua::get_world_size();
  int local = bagua::get_local_rank(), local_size = bagua::get_local_size();
  int node = bagua::get_node_rank();
  WorkerChecks c(rank);
  c.expect(node == rank / local_size && local == rank % local_size, "node and local rank from env");
  std::vector<int> intra_want, inter_want;
  for (int r = 0; r < world; ++r) {
    if (r / local_size == node) intra_want.push_back(r);
    if (r % local_size == local) inter_want.push_back(r);
  }
  auto group = bagua::default_group();
  auto intra = group->intra_node_group(), inter = group->inter_node_group();
  c.expect(intra->ranks() == intra_want, "intra-node members");
  c.expect(inter->ranks() == inter_want, "inter-node members");
  c.expect(intra->rank() == local, "intra-node rank is the local rank");
  c.expect(inter->rank() == node, "inter-node rank is the node rank");

  // Hierarchical sum: reduce to the node leader, allreduce among leaders,
  // broadcast within the node; equals a flat allreduce.
  at::Tensor x = input_of(rank, at::kDouble);
  bagua::reduce(x, 0, ReduceOp::SUM, intra);
  if (local == 0) bagua::allreduce(x, ReduceOp::SUM, inter);
  bagua::broadcast(x, 0, intra);
  c.expect_equal(x, reference(ReduceOp::SUM, world, [&](int r) { return input_of(r, at::kDouble); }),
                 "hierarchical allreduce over intra/inter groups");

  // A new group in a custom order; non-members cannot use it.
  std::vector<int> members;
  for (int r = world - 1; r >= 0; r -= 2) members.push_back(r);
  auto odd = bagua::new_group(members);
  auto pos = std::find(members.begin(), members.end(), rank);
  if (pos != members.end()) {
    c.expect(odd->rank() == pos - members.begin(), "new_group rank follows the given order");
    at::Tensor y = input_of(rank, at::kLong);
    bagua::allreduce(y, ReduceOp::SUM, odd);
    at::Tensor want = at::zeros_like(y);
    for (int r : members) want += input_of(r, at::kLong);
    c.expect_equal(y, want, "allreduce on new_group");
    at::Tensor z = at::tensor({rank}, at::kLong);
    bagua::broadcast(z, 0, odd);
    c.expect_equal(z, at::tensor({members[0]}, at::kLong), "broadcast root is a group rank");
  } else {
    c.expect(odd->rank() == -1, "non-member has rank -1");
    at::Tensor y = input_of(rank, at::kLong);
    c.expect_throws<bagua::InvalidArgument>([&] { bagua::allreduce(y, ReduceOp::SUM, odd); },
                                            "not a member", "collective on a group we are not in");
  }
  // Node leaders: the first member of each node, in group order.
  std::vector<int> leaders_want;
  for (int r = 0; r < world; ++r) {
    if (r % local_size == 0) leaders_want.push_back(r);
  }
  auto leaders = group->node_leaders_group();
  c.expect(leaders->is_member() == (local == 0), "only node leaders are in the leaders group");
  if (leaders->is_member()) c.expect(leaders->ranks() == leaders_want, "leaders group members");
  // Hierarchical sum on a group whose node leaders have different local
  // ranks ({1, 2} on two nodes of two): reduce in the node, allreduce among
  // the leaders, broadcast in the node.
  if (world >= 3) {
    auto pair = bagua::new_group({1, 2});
    if (pair->is_member()) {
      at::Tensor v = input_of(rank, at::kDouble);
      auto in_node = pair->intra_node_group();
      bagua::reduce(v, 0, ReduceOp::SUM, in_node);
      if (in_node->rank() == 0) bagua::allreduce(v, ReduceOp::SUM, pair->node_leaders_group());
      bagua::broadcast(v, 0, in_node);
      c.expect_equal(v, input_of(1, at::kDouble) + input_of(2, at::kDouble),
                     "hierarchical sum over a sub-group through its node leaders");
    }
  }
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::new_group({0, 0}); }, "listed twice",
                                          "new_group with a duplicate rank");
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::new_group({world}); }, "outside",
                                          "new_group with a rank out of range");
  bagua::barrier();
  return c.finish();
}

// Ranks that disagree get a clear error on every rank, and the group stays
// usable afterwards.
int scenario_mismatch() {
  bagua::init_process_group();
  int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  at::Tensor wrong_shape = at::ones({rank == 1 ? 5 : 4});
  c.expect_throws<bagua::CommError>([&] { bagua::allreduce(wrong_shape); }, "rank 1: allreduce float32[5]",
                                    "shape mismatch");
  at::Tensor wrong_dtype = rank == 0 ? at::ones({4}, at::kDouble) : at::ones({4}, at::kFloat);
  c.expect_throws<bagua::CommError>([&] { bagua::allreduce(wrong_dtype); }, "rank 0: allreduce float64[4]",
                                    "dtype mismatch");
  at::Tensor t = at::ones({3});
  c.expect_throws<bagua::CommError>([&] { bagua::broadcast(t, rank == 0 ? 0 : 1); }, "root",
                                    "roots disagree");
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::broadcast(t, world); }, "outside the group",
                                          "root out of range");
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::reduce(t, -1); }, "outside the group",
                                          "dst out of range");
  at::Tensor f = at::ones({3});
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::allreduce(f, ReduceOp::BAND); },
                                          "not defined on Float", "bitwise op on float");
  at::Tensor small = at::ones({2}), big = at::zeros({2 * world + 1});
  c.expect_throws<bagua::InvalidArgument>([&] { bagua::allgather(small, big); }, "times its elements",
                                          "allgather with a wrong recv size");
  at::Tensor ok = at::ones({4}) * (rank + 1);
  bagua::allreduce(ok);
  c.expect(ok[0].item<float>() == world * (world + 1) / 2.0f, "group still works after errors");
  c.expect_throws<bagua::RepeatedInitializationError>([] { bagua::init_process_group(); },
                                                      "already", "repeated init");
  return c.finish();
}

// Non-blocking point to point as a ring exchange posts it: every irecv and
// isend first, then the waits, on every rank at once, in both orders, with
// several messages of one tag in flight per direction (received in the
// order sent, whatever order the receiver waits in); with the argument
// check on (the default) and off. Then a size mismatch: both sides get a
// clear error, nothing aborts, and the group goes on.
int scenario_p2p_ring() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  WorkerChecks c(rank);
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  constexpr int kToNext = 3, kToPrev = 4, kMessages = 4;
  auto value = [](int sender, int direction, int k) { return static_cast<float>(1000 * sender + 100 * direction + k); };
  for (bool checked : {true, false}) {
    bagua::default_group()->set_verify_collectives(checked);
    for (bool sends_first : {false, true}) {
      const std::string what = std::string(checked ? "checked" : "unchecked") +
                               (sends_first ? ", sends posted first" : ", receives posted first");
      std::vector<at::Tensor> out, from_prev, from_next;
      std::vector<bagua::Work> receives, sends;
      auto post_receives = [&] {
        for (int k = 0; k < kMessages; ++k) {
          from_prev.push_back(at::zeros({1000 + k}));
          from_next.push_back(at::zeros({1000 + k}));
          receives.push_back(bagua::irecv(from_prev.back(), prev, nullptr, kToNext));
          receives.push_back(bagua::irecv(from_next.back(), next, nullptr, kToPrev));
        }
      };
      auto post_sends = [&] {
        for (int k = 0; k < kMessages; ++k) {
          out.push_back(at::full({1000 + k}, value(rank, kToNext, k)));
          sends.push_back(bagua::isend(out.back(), next, nullptr, kToNext));
          out.push_back(at::full({1000 + k}, value(rank, kToPrev, k)));
          sends.push_back(bagua::isend(out.back(), prev, nullptr, kToPrev));
        }
      };
      if (sends_first) {
        post_sends();
        post_receives();
        for (auto& w : sends) w.wait();  // before any receive is waited
        for (auto it = receives.rbegin(); it != receives.rend(); ++it) it->wait();  // the last first
      } else {
        post_receives();
        post_sends();
        for (auto it = receives.rbegin(); it != receives.rend(); ++it) it->wait();
        for (auto& w : sends) w.wait();
      }
      bool right = true;
      for (int k = 0; k < kMessages; ++k) {
        right = right && at::equal(from_prev[k], at::full({1000 + k}, value(prev, kToNext, k))) &&
                at::equal(from_next[k], at::full({1000 + k}, value(next, kToPrev, k)));
      }
      c.expect(right, "ring exchange, " + what + ": every message arrived, in the order sent");
    }
  }
  bagua::default_group()->set_verify_collectives(true);
  if (world >= 2 && rank <= 1) {
    // Rank 0 sends 5 floats where rank 1 expects 4.
    if (rank == 0) {
      at::Tensor five = at::ones({5});
      bagua::Work w = bagua::isend(five, 1, nullptr, 7);
      c.expect_throws<bagua::CommError>([&] { w.wait(); }, "the receiver expects float32 with 4 elements",
                                        "the sender of a mismatched message");
    } else {
      at::Tensor four = at::zeros({4});
      bagua::Work w = bagua::irecv(four, 0, nullptr, 7);
      c.expect_throws<bagua::CommError>([&] { w.wait(); }, "the sender sends float32 with 5 elements",
                                        "the receiver of a mismatched message");
    }
  }
  if (world >= 2 && rank <= 1) {
    // Two sends of one tag in flight, the first mismatched: each send gets
    // its own receive's answer (answers once crossed: the matching send
    // failed with a message contradicting itself, the other waited out the
    // timeout), and the second fails at once, as the first broke the channel.
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      at::Tensor five = at::ones({5}), eight = at::ones({8});
      bagua::Work first = bagua::isend(five, 1, nullptr, 8);
      bagua::Work second = bagua::isend(eight, 1, nullptr, 8);
      c.expect_throws<bagua::CommError>([&] { first.wait(); }, "the receiver expects float32 with 4 elements",
                                        "the first of two sends in flight, mismatched");
      c.expect_throws<bagua::CommError>([&] { second.wait(); }, "not received, as an earlier message to it with tag 8",
                                        "the second of two sends in flight, behind a mismatch");
    } else {
      at::Tensor four = at::zeros({4}), eight = at::zeros({8});
      bagua::Work first = bagua::irecv(four, 0, nullptr, 8);
      bagua::Work second = bagua::irecv(eight, 0, nullptr, 8);
      c.expect_throws<bagua::CommError>([&] { first.wait(); }, "the sender sends float32 with 5 elements",
                                        "the first of two receives in flight, mismatched");
      c.expect_throws<bagua::CommError>([&] { second.wait(); }, "not received, as an earlier message from rank 0",
                                        "the second of two receives in flight, behind a mismatch");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.expect(seconds < 10, "two sends in flight behind a mismatch fail at once, not after the timeout (" +
                               std::to_string(seconds) + " s)");
  }
  c.expect_throws<bagua::InvalidArgument>(
      [&] {
        at::Tensor t = at::zeros({1});
        bagua::isend(t, next == rank ? 0 : next, nullptr, 1 << 20);
      },
      world > 1 ? "is outside [0, 1048576)" : "cannot send to itself", "a tag out of range");
  at::Tensor ok = at::ones({4}) * (rank + 1);
  bagua::allreduce(ok);
  c.expect(ok[0].item<float>() == world * (world + 1) / 2.0f, "the group still works after the mismatch");
  return c.finish();
}

// Rank 1 leaves before the collective; the others must fail, not hang.
int scenario_peer_dies() {
  bagua::init_process_group();
  int rank = bagua::get_rank();
  WorkerChecks c(rank);
  if (rank == 1) std::_Exit(0);
  at::Tensor x = at::ones({1 << 16});
  auto t0 = std::chrono::steady_clock::now();
  c.expect_throws<bagua::CommError>([&] { bagua::allreduce(x); }, "allreduce on group",
                                    "allreduce with a dead peer");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "rank " << rank << ": failed after " << s << " s" << std::endl;
  return c.finish();
}

// Rank 1 crashes while the others wait in a collective: the launcher must
// stop them and name rank 1 (their own timeout is far away).
int scenario_crash() {
  bagua::init_process_group();
  if (bagua::get_rank() == 1) std::raise(SIGSEGV);
  at::Tensor x = at::ones({4});
  bagua::allreduce(x);
  bagua::allreduce(x);
  return 0;
}

// Leaves and joins the group again, 4 times, each time one rank slow to
// leave: the others join again while its group (and, when it is rank 0,
// the store it serves) still exists. They used to rendezvous with the old
// store and die ("Broken pipe"), or hang.
int scenario_rejoin() {
  int rank = -1;
  std::unique_ptr<WorkerChecks> c;
  for (int round = 0; round < 4; ++round) {
    bagua::init_process_group();
    const int world = bagua::get_world_size();
    if (!c) c = std::make_unique<WorkerChecks>(rank = bagua::get_rank());
    at::Tensor x = at::full({3}, static_cast<double>(rank + round), at::kDouble);
    bagua::allreduce(x);
    const double want = world * round + world * (world - 1) / 2.0;
    c->expect_equal(x, at::full({3}, want, at::kDouble), "allreduce after joining " + std::to_string(round + 1) + " times");
    if (rank == round % world) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    bagua::destroy_process_group();
  }
  return c->finish();
}

// Rank 0 keeps a group handle across destroy_process_group(), so its store
// stays up: the other ranks leave at once rather than wait out their
// timeout (BAGUA_TIMEOUT_S) for a close that is not coming; rank 0's next
// init_process_group() names the handle; once rank 0 releases it (it says
// so in the file BAGUA_TEST_SYNC_FILE), every rank joins again.
int scenario_kept_handle() {
  bagua::init_process_group();
  const int rank = bagua::get_rank();
  const int world = bagua::get_world_size();
  WorkerChecks c(rank);
  std::vector<int> all(world);
  for (int r = 0; r < world; ++r) all[r] = r;
  bagua::ProcessGroupPtr kept = bagua::new_group(all);
  if (rank != 0) kept.reset();
  const auto before = std::chrono::steady_clock::now();
  bagua::destroy_process_group();
  const double left_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  const char* sync_env = std::getenv("BAGUA_TEST_SYNC_FILE");
  const std::string released = sync_env ? sync_env : "";
  c.expect(!released.empty(), "BAGUA_TEST_SYNC_FILE is set");
  if (rank == 0) {
    try {
      bagua::init_process_group();
      c.expect(false, "rank 0 served a second store on a port its first still holds");
    } catch (const bagua::CommError& e) {
      c.expect(std::string(e.what()).find("kept by a group handle") != std::string::npos,
               std::string("rank 0's error names the kept handle: ") + e.what());
    }
    kept.reset();
    std::FILE* f = std::fopen(released.c_str(), "w");
    if (f) std::fclose(f);
  } else {
    // The timeout is 60 s; waiting for a close rank 0 never makes would take all of it.
    c.expect(left_s < 20, "rank " + std::to_string(rank) + " left in " + std::to_string(left_s) + " s");
    for (int i = 0; i < 600; ++i) {
      if (std::FILE* f = std::fopen(released.c_str(), "r")) {
        std::fclose(f);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  bagua::init_process_group();
  at::Tensor x = at::full({2}, static_cast<double>(rank), at::kDouble);
  bagua::allreduce(x);
  c.expect_equal(x, at::full({2}, world * (world - 1) / 2.0, at::kDouble), "allreduce after joining again");
  bagua::destroy_process_group();
  return c.finish();
}

// Just joins (or fails to join) the group: the parent checks the message.
int scenario_join() {
  bagua::init_process_group();
  bagua::barrier();
  std::cout << "rank " << bagua::get_rank() << ": joined" << std::endl;
  return 0;
}

}  // namespace

int run_scenario(const std::string& name) {
  return bagua::testing::dispatch_scenario(name, {
      {"collectives", scenario_collectives}, {"groups", scenario_groups},
      {"mismatch", scenario_mismatch},       {"peer_dies", scenario_peer_dies},
      {"join", scenario_join},               {"crash", scenario_crash},
      {"p2p_ring", scenario_p2p_ring},       {"rejoin", scenario_rejoin},
      {"kept_handle", scenario_kept_handle},
  });
}
