#include "train/checkpoint.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"
#include "train/checkpoint_files.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <mutex>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace bagua::train {
namespace {

at::Tensor rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }
void set_rng_state(const at::Tensor& state) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

void save_module(const torch::jit::Module& module, const std::string& path) {
  std::ostringstream bytes;
  module.save(bytes);
  const fs::path tmp = path + ".tmp";
  try {
    write_text(tmp, bytes.str());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot write " + path + ": " + ec.message());
  }
}

void save_host_module(const torch::jit::Module& module, const std::string& path) {
  bool on_host = true;
  for (const auto& p : module.parameters()) on_host = on_host && p.device().is_cpu();
  for (const auto& b : module.buffers()) on_host = on_host && b.device().is_cpu();
  if (on_host) return save_module(module, path);
  torch::jit::Module host = module.clone();
  host.to(torch::kCPU);
  save_module(host, path);
}

namespace {

// This rank's files into `tmp`: rank-R.pt (its sum returned) and, on rank 0,
// model.pt, optimizer-I.pt and recipe.resolved.yaml (listed in `files`).
FileSum write_files(const SaveCheckpointOptions& o, const fs::path& tmp, bool leader,
                    std::vector<CheckpointFile>& files) {
  fs::create_directories(tmp);
  const RankState& rank = o.rank;
  torch::serialize::OutputArchive mine;
  mine.write("rng", rng_state());
  if (rank.model) {
    for (const auto& [name, t] : rank.parameters) mine.write("param." + name, t.detach().cpu());
    for (const auto& [name, t] : rank.buffers) mine.write("buffer." + name, t.detach().cpu(), /*is_buffer=*/true);
    for (size_t i = 0; i < o.optimizers.size(); ++i) {
      torch::serialize::OutputArchive opt;
      o.optimizers[i]->save(opt);
      mine.write("optimizer-" + std::to_string(i), opt);
    }
  }
  if (rank.save_algorithm) {
    torch::serialize::OutputArchive algorithm;
    rank.save_algorithm(algorithm);
    mine.write("algorithm", algorithm);
  }
  const FileSum rank_sum = save_archive(mine, tmp / ("rank-" + std::to_string(get_rank()) + ".pt"));
  if (!leader) return rank_sum;
  torch::serialize::OutputArchive model;
  // Host copies: a checkpoint written on GPUs loads anywhere.
  for (const auto& [name, t] : o.parameters) model.write(name, t.detach().cpu(), /*is_buffer=*/false);
  for (const auto& [name, t] : o.buffers) model.write(name, t.detach().cpu(), /*is_buffer=*/true);
  files.push_back(checkpoint_file("model.pt", save_archive(model, tmp / "model.pt")));
  for (size_t i = 0; i < o.optimizers.size(); ++i) {
    torch::serialize::OutputArchive opt;
    o.optimizers[i]->save(opt);
    const std::string name = "optimizer-" + std::to_string(i) + ".pt";
    files.push_back(checkpoint_file(name, save_archive(opt, tmp / name)));
  }
  files.push_back(checkpoint_file("recipe.resolved.yaml",
                                  write_text(tmp / "recipe.resolved.yaml", resolved_recipe_yaml(*o.recipe))));
  return rank_sum;
}

// Rank 0: meta.json, written last (its presence marks the checkpoint
// complete, its sums catch a torn one), then the rename into place. A
// checkpoint of this step already there (a run that resumed behind it) is
// moved aside, not removed, before the new one takes its name: at every
// moment one complete copy exists under a name a resume recovers
// (recover_interrupted_saves()).
void commit(const std::string& dir, const CheckpointMeta& meta, const fs::path& tmp, const fs::path& final_dir) {
  write_text(tmp / "meta.json", to_json(meta).dump(2) + "\n");
  fsync_path(tmp);
  replace_directory(tmp, final_dir, fs::path(dir) / ("." + step_name(meta.position.step) + ".old"));
}

// Only the `keep` newest checkpoints up to `step` stay: newer ones (left by
// a run this one resumed behind, e.g. from an explicit older checkpoint)
// are never pruned.
void prune(const std::string& dir, int64_t step, int64_t keep) {
  std::vector<fs::path> older;
  for (const auto& [s, path] : complete_checkpoints(dir)) {
    if (s <= step) older.push_back(path);
  }
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < older.size(); ++i) {
    std::error_code ec;
    bagua::compat::remove_all(older[i], ec);
  }
}

}  // namespace

void save_checkpoint(const SaveCheckpointOptions& options) {
  const std::string& dir = options.dir;
  const int64_t step = options.meta.position.step;
  const ProcessGroupPtr& group = options.group;
  const bool leader = group->rank() == 0;
  const int world = group->size();
  const fs::path final_dir = fs::path(dir) / step_name(step);
  const fs::path tmp = fs::path(dir) / ("." + step_name(step) + ".tmp");
  if (leader) bagua::compat::remove_all(tmp);
  barrier(group);
  // Each rank's failure is caught, so that every rank learns of it at the
  // same collective below instead of waiting for a peer that gave up.
  std::string error;
  FileSum rank_sum;
  CheckpointMeta meta = options.meta;
  try {
    rank_sum = write_files(options, tmp, leader, meta.files);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank's outcome and the size and CRC-32 of its own file.
  at::Tensor mine = torch::tensor({static_cast<int64_t>(error.empty() ? 0 : 1), static_cast<int64_t>(rank_sum.bytes),
                                   static_cast<int64_t>(rank_sum.crc)},
                                  torch::kLong);
  at::Tensor all = torch::zeros({world, 3}, torch::kLong);
  allgather(mine, all, group);
  auto fail = [&](const std::string& why) {
    std::error_code ec;
    if (leader) bagua::compat::remove_all(tmp, ec);  // frees what it took; the earlier checkpoints stay
    auto kept = complete_checkpoints(dir);
    throw Error("could not write checkpoint " + final_dir.string() + ": " + why + ". " +
                (kept.empty() ? std::string("No earlier checkpoint exists.")
                              : "The earlier checkpoints are kept (newest: " + kept.back().second.string() + ").") +
                " Free space (or fix the directory) and run the same command to resume.");
  };
  for (int r = 0; r < world; ++r) {
    if (all[r][0].item<int64_t>() == 0) continue;
    std::string why = error;
    broadcast_object(why, r, group);
    fail("rank " + std::to_string(r) + ": " + why);
  }
  std::string leader_error;
  if (leader) {
    try {
      for (int r = 0; r < world; ++r) {
        FileSum sum;
        sum.bytes = static_cast<uint64_t>(all[r][1].item<int64_t>());
        sum.crc = static_cast<uint32_t>(all[r][2].item<int64_t>());
        meta.files.push_back(checkpoint_file("rank-" + std::to_string(r) + ".pt", sum));
      }
      meta.has_files = true;
      meta.world_size = world;
      meta.recipe = options.recipe->name;
      meta.algorithm = options.recipe->algorithm.name;
      meta.algorithm_kwargs = options.recipe->algorithm.kwargs;
      meta.optimizers = static_cast<int64_t>(options.optimizers.size());
      commit(dir, meta, tmp, final_dir);
    } catch (const std::exception& e) {
      leader_error = e.what();
    }
  }
  broadcast_object(leader_error, 0, group);
  if (!leader_error.empty()) fail("rank 0: " + leader_error);
  if (leader) prune(dir, step, options.keep);
  barrier(group);  // renamed: on machines without rank 0's filesystem, drop the local leftovers
  if (!leader && get_local_rank() == 0) {
    std::error_code ec;
    bagua::compat::remove_all(tmp, ec);
  }
}

namespace {

// Why the checkpoint at `where` cannot be trusted, or "" when it can; its
// meta.json in `meta` when it can. Files meta.json lists must have their
// size and CRC-32 (checkpoints from before the sums only need meta.json and
// model.pt). A listed rank-R.pt may be missing: on machines that do not
// share rank 0's filesystem only its own node's are there. (A meta.json of
// the right JSON but the wrong shape is a damaged checkpoint too, not a
// crash of the resume.)
// meta.json of the checkpoint at `where`, unverified (CheckpointMetaError
// when it cannot be read or parsed).
CheckpointMeta read_meta(const fs::path& where) {
  std::ifstream in(where / "meta.json");
  if (!in) throw CheckpointMetaError("meta.json cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return parse_checkpoint_meta(text.str());
}

std::string checkpoint_problem(const fs::path& where, CheckpointMeta* meta = nullptr) {
  CheckpointMeta m;
  try {
    m = read_meta(where);
  } catch (const CheckpointMetaError& e) {
    return e.what();
  }
  if (!m.has_files && !fs::exists(where / "model.pt")) return "model.pt is missing";
  for (const auto& want : m.files) {
    const fs::path file = where / want.name;
    if (!fs::exists(file)) {
      if (want.name.rfind("rank-", 0) == 0) continue;
      return want.name + " is missing";
    }
    FileSum got;
    try {
      got = file_sum(file);
    } catch (const std::exception& e) {
      return e.what();
    }
    if (want.bytes != got.bytes) {
      return want.name + " has " + std::to_string(got.bytes) + " bytes, meta.json says " + std::to_string(want.bytes);
    }
    if (want.crc32 != hex32(got.crc)) return want.name + "'s CRC-32 is " + hex32(got.crc) + ", meta.json says " + want.crc32;
  }
  if (meta) *meta = std::move(m);
  return "";
}

// What a run stopped while saving left behind: .step-N.tmp, complete (its
// meta.json, written last, verifies) when only the final rename was
// missing, else partial; .step-N.old, the copy a re-save of step N moved
// aside. A complete one whose step has no checkpoint becomes it (the .tmp,
// newer, first); the rest is removed. This run holds the output directory's
// lock, so nothing else is writing here.
void recover_interrupted_saves(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  static const std::regex name("\\.(step-[0-9]+)\\.(tmp|old)");
  std::vector<std::pair<fs::path, std::string>> tmps, olds;  // path, step-N
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    (m[2] == "tmp" ? tmps : olds).emplace_back(entry.path(), m[1]);
  }
  for (const auto* list : {&tmps, &olds}) {
    for (const auto& [path, step] : *list) {
      const fs::path final_dir = fs::path(dir) / step;
      if (!fs::exists(final_dir) && checkpoint_problem(path).empty()) {
        fs::rename(path, final_dir, ec);
        if (!ec) {
          std::fprintf(stderr, "recovered %s from %s, which a stopped run had written completely\n",
                       final_dir.c_str(), path.filename().c_str());
          continue;
        }
      }
      bagua::compat::remove_all(path, ec);
      std::fprintf(stderr, "removed %s, %s\n", path.c_str(),
                   list == &tmps ? "a checkpoint a stopped run did not finish writing"
                                 : "the earlier copy of a checkpoint that was saved again");
    }
  }
}

}  // namespace

namespace {

// Rank 0's choice: `path`, or the newest intact checkpoint under `dir`
// (damaged newer ones moved aside); {"where", "meta"}, {"error"}, or {}
// when there is none.
nlohmann::json choose_checkpoint(const std::string& dir, const std::string& path) {
  nlohmann::json d = nlohmann::json::object();
  recover_interrupted_saves(dir);
  CheckpointMeta meta;
  if (!path.empty()) {
    const std::string problem = checkpoint_problem(path, &meta);
    if (!problem.empty()) {
      return {{"error", "checkpoint " + path + " cannot be resumed: " + problem +
                            ". Name another checkpoint in checkpoint.resume, or use auto to take the newest intact one"}};
    }
    return {{"where", path}, {"meta", to_json(meta)}};
  }
  auto all = complete_checkpoints(dir);
  std::vector<std::pair<fs::path, std::string>> damaged;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string problem = checkpoint_problem(it->second, &meta);
    if (problem.empty()) {
      d = {{"where", it->second.string()}, {"meta", to_json(meta)}};
      break;
    }
    damaged.emplace_back(it->second, problem);
  }
  if (!damaged.empty() && d.contains("where")) {
    // Kept for inspection, out of the way of later resumes and pruning.
    for (const auto& [bad, problem] : damaged) {
      fs::path aside = bad;
      aside += ".damaged";
      std::error_code ec;
      bagua::compat::remove_all(aside, ec);
      fs::rename(bad, aside, ec);
      std::fprintf(stderr, "WARNING: checkpoint %s is damaged (%s); moved it to %s and resuming from %s, the "
                   "newest intact one\n", bad.c_str(), problem.c_str(), aside.c_str(),
                   d["where"].get<std::string>().c_str());
    }
  } else if (!damaged.empty()) {
    std::string list;
    for (const auto& [bad, problem] : damaged) list += "\n  " + bad.string() + ": " + problem;
    d["error"] = "no intact checkpoint to resume from in " + dir + ":" + list +
                 "\nRestore them, or start afresh with --set checkpoint.resume=never (which moves them aside)";
  }
  return d;
}

// Rank 0: the model and the optimizers' state from checkpoint `where`.
void load_shared_state(const std::string& where, const NamedTensors& parameters, const NamedTensors& buffers,
                       const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers) {
  torch::NoGradGuard no_grad;
  // Tensors land on the device the run trains on, whatever wrote them.
  const at::Device device = parameters.empty() ? at::Device(at::kCPU) : parameters.front().second.device();
  torch::serialize::InputArchive model;
  model.load_from((fs::path(where) / "model.pt").string(), device);
  for (const auto& [name, t] : parameters) {
    at::Tensor loaded;
    if (!model.try_read(name, loaded)) {
      throw Error("checkpoint " + where + " has no parameter '" + name + "' (was it written for another model?)", true);
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

}  // namespace

std::optional<ResumedCheckpoint> resume_checkpoint(const std::string& dir, const std::string& path,
                                                   const NamedTensors& parameters, const NamedTensors& buffers,
                                                   const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                                   const ProcessGroupPtr& group, const MetaCheck& verify) {
  // Rank 0 picks a checkpoint that verifies and tells the others.
  std::string decision = "{}";
  if (group->rank() == 0) decision = choose_checkpoint(dir, path).dump();
  broadcast_object(decision, 0, group);
  const nlohmann::json d = nlohmann::json::parse(decision);
  if (d.contains("error")) throw Error(d["error"].get<std::string>(), true);
  if (!d.contains("where")) return std::nullopt;
  ResumedCheckpoint resumed{d["where"].get<std::string>(), checkpoint_meta_from_json(d["meta"])};
  const std::string& where = resumed.where;
  if (resumed.meta.optimizers != static_cast<int64_t>(optimizers.size())) {
    throw Error("checkpoint " + where + " has state for " + std::to_string(resumed.meta.optimizers) +
                    " optimizers, the recipe defines " + std::to_string(optimizers.size()),
                true);
  }
  if (verify) verify(where, resumed.meta);  // before any state is loaded
  if (group->rank() == 0) load_shared_state(where, parameters, buffers, optimizers);
  return resumed;
}

void load_rank_state(const std::string& where, const NamedTensors& parameters, const NamedTensors& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const RankState& rank, bool rng_only) {
  const fs::path file = fs::path(where) / ("rank-" + std::to_string(get_rank()) + ".pt");
  if (!fs::exists(file) && !rng_only && (rank.model || rank.load_algorithm)) {
    // Listed but absent: written on another machine (checkpoints of several
    // machines need one shared directory). Never silent: this rank goes on
    // with rank 0's model and optimizer state.
    bool listed = false;
    try {
      listed = read_meta(where).file(file.filename().string()) != nullptr;
    } catch (const CheckpointMetaError&) {
    }
    if (listed) {
      std::fprintf(stderr,
                   "WARNING: checkpoint %s lists %s but it is not on this machine: rank %d resumes with rank 0's "
                   "model and optimizer state, its own is lost (give every node the same checkpoint directory)\n",
                   where.c_str(), file.filename().c_str(), get_rank());
    }
  }
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
  if (rng_only) return;
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
