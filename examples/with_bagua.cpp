// Bagua's with_bagua example, in C++: a Sequential(Linear, ReLU, Linear)
// trained with SGD + momentum, data-parallel with GradientAllReduce.
//
//   build/cli/bagua launch --nproc-per-node 2 -- build/examples/with_bagua
//
// Each rank draws its own batches of a fixed regression task; the loss each
// rank prints falls, and rank 0 ends by checking that every rank holds the
// same weights.
#include <bagua/algorithms/gradient_allreduce.h>
#include <bagua/communication.h>
#include <bagua/distributed.h>

#include <torch/torch.h>

#include <iostream>

int main() {
  bagua::init_process_group();
  const int rank = bagua::get_rank(), world = bagua::get_world_size();
  const int64_t D_in = 16, H = 32, D_out = 4;

  torch::manual_seed(rank);  // different on purpose: with_bagua starts everyone from rank 0's
  auto model = torch::nn::Sequential(torch::nn::Linear(D_in, H), torch::nn::ReLU(), torch::nn::Linear(H, D_out));
  auto optimizer = std::make_shared<torch::optim::SGD>(model->parameters(),
                                                       torch::optim::SGDOptions(0.01).momentum(0.9));
  auto ddp = bagua::with_bagua(*model, {optimizer}, std::make_shared<bagua::GradientAllReduce>());

  torch::manual_seed(1234);
  const at::Tensor truth = torch::randn({D_in, D_out});
  torch::manual_seed(100 + rank);  // each rank its own samples
  for (int step = 1; step <= 200; ++step) {
    at::Tensor x = torch::randn({32, D_in});
    at::Tensor y = torch::matmul(x, truth);
    ddp->zero_grad();  // gradients set to none: backward writes them afresh
    at::Tensor loss = torch::mse_loss(ddp->forward(model, x), y);
    loss.backward();  // gradients are averaged across the ranks when this returns
    ddp->step();
    if (step % 50 == 0) std::cout << "step " << step << " loss " << loss.item<float>() << std::endl;
  }

  std::vector<at::Tensor> parts;
  for (auto& p : model->parameters()) parts.push_back(p.detach().reshape({-1}));
  at::Tensor mine = torch::cat(parts), all = torch::zeros({world, mine.numel()});
  bagua::allgather(mine, all);
  bool same = true;
  for (int r = 1; r < world; ++r) same = same && torch::equal(all[r], all[0]);
  if (rank == 0) std::cout << (same ? "all ranks hold identical weights" : "ranks DIVERGED") << std::endl;
  return same ? 0 : 1;
}
