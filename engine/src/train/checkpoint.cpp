#include "train/checkpoint.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <fcntl.h>
#include <mutex>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace bagua::train {
namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%08lld", static_cast<long long>(step));
  return buf;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw Error("could not write " + path.string());
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Checkpoint directories under `dir`, oldest first (only complete ones).
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  static const std::regex name("step-([0-9]+)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    std::string base = entry.path().filename().string();
    if (entry.is_directory() && std::regex_match(base, m, name) && fs::exists(entry.path() / "meta.json")) {
      out.emplace_back(std::stoll(m[1]), entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

at::Tensor rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }
void set_rng_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

nlohmann::json data_plan(const Recipe& recipe, int64_t train_samples) {
  const auto& data = recipe.resolved.at("data");
  return {{"batch_size", data.at("batch_size")},
          {"sampler", data.at("sampler")},
          {"train", data.at("train")},
          {"train_samples", train_samples}};
}

void check_data_plan(const nlohmann::json& saved, const nlohmann::json& now, const std::string& where, bool allow) {
  if (saved.is_null() || !saved.is_object()) return;  // written before this check existed
  std::vector<std::string> changed;
  auto compare = [&](const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
    if (a != b) changed.push_back(key + ": " + a.dump() + " in the checkpoint, " + b.dump() + " now");
  };
  compare("data.batch_size", saved.value("batch_size", nlohmann::json()), now.at("batch_size"));
  const auto& ss = saved.value("sampler", nlohmann::json::object());
  for (auto it = now.at("sampler").begin(); it != now.at("sampler").end(); ++it) {
    compare("data.sampler." + it.key(), ss.value(it.key(), nlohmann::json()), it.value());
  }
  compare("data.train", saved.value("train", nlohmann::json()), now.at("train"));
  compare("the number of training samples", saved.value("train_samples", nlohmann::json()), now.at("train_samples"));
  if (changed.empty()) return;
  std::string list;
  for (const auto& c : changed) list += "\n  " + c;
  if (allow) {
    std::fprintf(stderr, "WARNING: resuming from %s although the batches differ from the run that wrote it "
                 "(checkpoint.allow_data_change is true):%s\n", where.c_str(), list.c_str());
    return;
  }
  throw Error("resuming from " + where + " would silently change what the saved position in the epoch means:" +
                  list + "\nRun with the checkpoint's settings, start afresh (--set checkpoint.resume=never or "
                  "another output.dir), or accept the change with --set checkpoint.allow_data_change=true",
              true);
}

void save_checkpoint(const std::string& dir, const Position& pos, const Recipe& recipe,
                     const NamedTensors& parameters, const NamedTensors& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const ProcessGroupPtr& group, int64_t keep, const RankState& rank,
                     const nlohmann::json& plan) {
  const bool leader = group->rank() == 0;
  const fs::path final_dir = fs::path(dir) / step_name(pos.step);
  const fs::path tmp = fs::path(dir) / ("." + step_name(pos.step) + ".tmp");
  if (leader) {
    bagua::compat::remove_all(tmp);
  }
  barrier(group);
  fs::create_directories(tmp);
  {
    torch::serialize::OutputArchive mine;
    mine.write("rng", rng_state());
    if (rank.model) {
      for (const auto& [name, t] : rank.parameters) mine.write("param." + name, t.detach().cpu());
      for (const auto& [name, t] : rank.buffers) mine.write("buffer." + name, t.detach().cpu(), /*is_buffer=*/true);
      for (size_t i = 0; i < optimizers.size(); ++i) {
        torch::serialize::OutputArchive opt;
        optimizers[i]->save(opt);
        mine.write("optimizer-" + std::to_string(i), opt);
      }
    }
    if (rank.save_algorithm) {
      torch::serialize::OutputArchive algorithm;
      rank.save_algorithm(algorithm);
      mine.write("algorithm", algorithm);
    }
    mine.save_to((tmp / ("rank-" + std::to_string(get_rank()) + ".pt")).string());
  }
  if (leader) {
    torch::serialize::OutputArchive model;
    // Host copies: a checkpoint written on GPUs loads anywhere.
    for (const auto& [name, t] : parameters) model.write(name, t.detach().cpu(), /*is_buffer=*/false);
    for (const auto& [name, t] : buffers) model.write(name, t.detach().cpu(), /*is_buffer=*/true);
    model.save_to((tmp / "model.pt").string());
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::save(*optimizers[i], (tmp / ("optimizer-" + std::to_string(i) + ".pt")).string());
    }
    write_text(tmp / "recipe.resolved.yaml", resolved_recipe_yaml(recipe));
    nlohmann::json meta = {{"step", pos.step},
                           {"epoch", pos.epoch},
                           {"batch_in_epoch", pos.batch_in_epoch},
                           {"world_size", group->size()},
                           {"recipe", recipe.name},
                           {"algorithm", recipe.algorithm.name},
                           {"algorithm_kwargs", recipe.algorithm.kwargs},
                           {"optimizers", optimizers.size()}};
    if (!plan.is_null()) meta["data"] = plan;
    for (const auto& entry : fs::directory_iterator(tmp)) fsync_path(entry.path());
    write_text(tmp / "meta.json", meta.dump(2) + "\n");  // last: marks the checkpoint complete
    fsync_path(tmp / "meta.json");
  }
  barrier(group);  // every rank's RNG file is in place
  if (leader) {
    bagua::compat::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    fsync_path(dir);
    auto all = complete_checkpoints(dir);
    for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < all.size(); ++i) bagua::compat::remove_all(all[i].second);
  }
  barrier(group);  // renamed: on machines without rank 0's filesystem, drop the local leftovers
  if (!leader && get_local_rank() == 0) {
    std::error_code ec;
    bagua::compat::remove_all(tmp, ec);
  }
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = complete_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

std::optional<Position> resume_checkpoint(const std::string& dir, const std::string& path,
                                          const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                          const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                                          const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                          const ProcessGroupPtr& group, std::string* chosen,
                                          nlohmann::json* meta_out) {
  std::string where, meta_text;
  if (group->rank() == 0) {
    if (!path.empty()) {
      where = path;
    } else if (auto latest = latest_checkpoint(dir)) {
      where = *latest;
    }
    if (!where.empty()) {
      std::ifstream in(fs::path(where) / "meta.json");
      std::stringstream s;
      s << in.rdbuf();
      meta_text = s.str();
      if (meta_text.empty()) where = "!" + where;  // tell the others it is unreadable
    }
  }
  broadcast_object(where, 0, group);
  if (where.empty()) return std::nullopt;
  if (where[0] == '!') {
    throw Error("checkpoint " + where.substr(1) + " has no readable meta.json; it is incomplete or not a "
                "bagua checkpoint", true);
  }
  broadcast_object(meta_text, 0, group);
  auto meta = nlohmann::json::parse(meta_text);
  if (meta_out) *meta_out = meta;
  int64_t saved_world = meta.at("world_size").get<int64_t>();
  if (saved_world != group->size()) {
    throw Error("checkpoint " + where + " was written by " + std::to_string(saved_world) +
                    " workers and this run has " + std::to_string(group->size()) +
                    "; the position in the epoch depends on the number of workers, so it cannot be resumed. "
                    "Run with " + std::to_string(saved_world) +
                    " workers, or start afresh with --set checkpoint.resume=never (or another output.dir)",
                true);
  }
  if (meta.at("optimizers").get<size_t>() != optimizers.size()) {
    throw Error("checkpoint " + where + " has state for " + meta.at("optimizers").dump() +
                    " optimizers, the recipe defines " + std::to_string(optimizers.size()),
                true);
  }
  if (group->rank() == 0) {
    torch::NoGradGuard no_grad;
    // Tensors land on the device the run trains on, whatever wrote them.
    const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
    torch::serialize::InputArchive model;
    model.load_from((fs::path(where) / "model.pt").string(), device);
    for (const auto& [name, t] : parameters) {
      at::Tensor loaded;
      if (!model.try_read(name, loaded)) {
        throw Error("checkpoint " + where + " has no parameter '" + name + "' (was it written for another model?)",
                    true);
      }
      t.detach().copy_(loaded);
    }
    for (const auto& [name, t] : buffers) {
      at::Tensor loaded;
      if (model.try_read(name, loaded, /*is_buffer=*/true)) t.detach().copy_(loaded);
    }
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::load(*optimizers[i], (fs::path(where) / ("optimizer-" + std::to_string(i) + ".pt")).string(), device);
    }
  }
  if (chosen) *chosen = where;
  return Position{meta.at("step").get<int64_t>(), meta.at("epoch").get<int64_t>(),
                  meta.at("batch_in_epoch").get<int64_t>()};
}

void load_rank_state(const std::string& where, const NamedTensors& parameters, const NamedTensors& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const RankState& rank) {
  const fs::path file = fs::path(where) / ("rank-" + std::to_string(get_rank()) + ".pt");
  if (!fs::exists(file)) {
    // Written before rank files existed: only the RNG was per rank.
    const fs::path rng = fs::path(where) / ("rng-rank-" + std::to_string(get_rank()) + ".pt");
    if (fs::exists(rng)) {
      at::Tensor state;
      torch::load(state, rng.string());
      set_rng_state(state);
    }
    return;
  }
  torch::NoGradGuard no_grad;
  const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  torch::serialize::InputArchive mine;
  mine.load_from(file.string(), device);
  at::Tensor t;
  mine.read("rng", t);
  set_rng_state(t.cpu());
  if (rank.model) {
    auto missing = [&](const std::string& what) {
      return Error("checkpoint " + where + ": " + file.filename().string() + " has no " + what +
                       " (was it written by a run whose ranks shared one model?)",
                   true);
    };
    for (const auto& [name, p] : parameters) {
      at::Tensor loaded;
      if (!mine.try_read("param." + name, loaded)) throw missing("parameter " + name);
      p.detach().copy_(loaded);
    }
    for (const auto& [name, b] : buffers) {
      at::Tensor loaded;
      if (mine.try_read("buffer." + name, loaded, /*is_buffer=*/true)) b.detach().copy_(loaded);
    }
    for (size_t i = 0; i < optimizers.size(); ++i) {
      torch::serialize::InputArchive opt;
      if (!mine.try_read("optimizer-" + std::to_string(i), opt)) throw missing("state of optimizer " + std::to_string(i));
      optimizers[i]->load(opt);
    }
  }
  if (rank.load_algorithm) {
    torch::serialize::InputArchive algorithm;
    if (mine.try_read("algorithm", algorithm)) rank.load_algorithm(algorithm);
  }
}

}  // namespace bagua::train
