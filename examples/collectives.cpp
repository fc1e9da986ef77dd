// The collectives of bagua/communication.h, run by every worker of a launch:
//
//   build/cli/bagua launch --nproc-per-node 4 -- build/examples/collectives
//
// Each rank prints what it holds before and after, so the output shows what
// each collective does. The examples are those of Bagua's documentation.
#include <bagua/communication.h>

#include <ATen/ATen.h>

#include <iostream>
#include <sstream>

namespace {
std::string show(const at::Tensor& t) {
  std::ostringstream out;
  out << "[";
  at::Tensor flat = t.reshape({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (i) out << ", ";
    if (t.is_complex()) {
      auto z = flat[i].item<c10::complex<float>>();
      out << z.real() << "+" << z.imag() << "j";
    } else {
      out << flat[i].item<double>();
    }
  }
  return out.str() + "]";
}
}  // namespace

int main() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  auto say = [&](const std::string& what) { std::cout << what << std::endl; };
  if (rank == 0) say("world size " + std::to_string(world));

  at::Tensor ints = at::arange(2, at::kLong) + 1 + 2 * rank;
  std::string before = show(ints);
  bagua::allreduce(ints);
  say("allreduce int64 " + before + " -> " + show(ints));

  at::Tensor z = at::view_as_complex(at::tensor({1.f, 1.f, 2.f, 2.f}).view({2, 2})) +
                 at::view_as_complex(at::full({2, 2}, 2.f * rank));
  before = show(z);
  bagua::allreduce(z);
  say("allreduce complex64 " + before + " -> " + show(z));

  at::Tensor mx = at::tensor({static_cast<float>(rank)});
  bagua::allreduce(mx, bagua::ReduceOp::MAX);
  say("allreduce MAX of the ranks -> " + show(mx));

  at::Tensor b = at::full({3}, static_cast<float>(rank));
  bagua::broadcast(b, world - 1);
  say("broadcast from rank " + std::to_string(world - 1) + " -> " + show(b));

  at::Tensor gathered = at::zeros({world}, at::kLong);
  bagua::allgather(at::tensor({static_cast<int64_t>(rank * rank)}), gathered);
  say("allgather of rank^2 -> " + show(gathered));

  auto intra = bagua::default_group()->intra_node_group();
  auto inter = bagua::default_group()->inter_node_group();
  say("node " + std::to_string(bagua::get_node_rank()) + ": intra-node group has " +
      std::to_string(intra->size()) + " ranks, inter-node group " + std::to_string(inter->size()));

  std::string message = rank == 0 ? "hello from rank 0" : "";
  bagua::broadcast_object(message, 0);
  say("broadcast_object -> \"" + message + "\"");
  bagua::barrier();
  return 0;
}
