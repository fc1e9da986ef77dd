// What the algorithm tests' worker scenarios share: a small model, the
// data of each step, and every rank's gradients recomputed on a reference
// copy, so each rank can apply an algorithm's math by hand.
#pragma once

#include <bagua/bucket.h>

#include <torch/torch.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bagua::testing::ref {

using Seq = torch::nn::Sequential;
constexpr int64_t kBatch = 4, kIn = 6, kOut = 3;

inline Seq make_mlp() {
  return Seq(torch::nn::Linear(kIn, 10), torch::nn::Tanh(), torch::nn::Linear(10, 10), torch::nn::Tanh(),
             torch::nn::Linear(10, kOut));
}

inline at::Tensor flat_params(torch::nn::Module& m) {
  std::vector<at::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}));
  return torch::cat(parts);
}

// The data of step `step`: the same on every rank; rank q trains on rows
// [q * kBatch, (q + 1) * kBatch).
inline std::pair<at::Tensor, at::Tensor> batch_of(int64_t step, int world) {
  torch::manual_seed(77 + step);
  at::Tensor x = torch::randn({world * kBatch, kIn});
  at::Tensor y = torch::randn({world * kBatch, kOut});
  return {x, y};
}

// Every rank's gradients of `ref` (named like the model's parameters).
inline std::vector<std::map<std::string, at::Tensor>> all_gradients(Seq& ref, int64_t step, int world) {
  auto [x, y] = batch_of(step, world);
  std::vector<std::map<std::string, at::Tensor>> out(world);
  for (int q = 0; q < world; ++q) {
    ref->zero_grad();
    torch::mse_loss(ref->forward(x.narrow(0, q * kBatch, kBatch)), y.narrow(0, q * kBatch, kBatch)).backward();
    for (const auto& item : ref->named_parameters()) out[q][item.key()] = item.value().grad().clone();
  }
  return out;
}

// A bucket's tensors of rank q, flattened in bucket order and zero-padded.
inline at::Tensor bucket_flat(const bagua::Bucket& bucket, const std::map<std::string, at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  for (const auto& t : bucket.tensors()) parts.push_back(tensors.at(t.name).reshape({-1}));
  at::Tensor flat = torch::cat(parts);
  return torch::cat({flat, torch::zeros({bucket.padded_numel() - flat.numel()})});
}

// The weights of `m` by name.
inline std::map<std::string, at::Tensor> named_weights(Seq& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m->named_parameters()) out[item.key()] = item.value().detach();
  return out;
}

// Copies `flat` (a bucket's tensors in bucket order) into `m`'s weights.
inline void write_bucket(const bagua::Bucket& bucket, const at::Tensor& flat, Seq& m) {
  torch::NoGradGuard no_grad;
  auto weights = named_weights(m);
  int64_t offset = 0;
  for (const auto& t : bucket.tensors()) {
    at::Tensor w = weights.at(t.name);
    w.copy_(flat.narrow(0, offset, t.numel()).view(w.sizes()));
    offset += t.numel();
  }
}

inline Seq clone_of(Seq& m) { return Seq(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(m->clone())); }

}  // namespace bagua::testing::ref

// The scenarios of decentralized_scenarios.cpp.
int scenario_decentralized_exact();
int scenario_low_precision_decentralized_exact();
int scenario_low_precision_decentralized_replicas();
int scenario_async_abort_resume();
int scenario_async_one_rank_finished();
int scenario_async_destroy_without_abort();
