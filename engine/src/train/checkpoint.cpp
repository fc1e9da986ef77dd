#include "train/checkpoint.h"

#include <bagua/errors.h>

#include "common/libtorch_compat.h"
#include "train/crc32.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>

#include <fcntl.h>
#include <mutex>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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

std::string errno_text(int error) { return std::strerror(error); }

// Size and CRC-32 (zlib's, as Python's zlib.crc32) of a file.
struct FileSum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// A file written and made durable with every step checked (a full disk
// shows at write, fsync or close, depending on the filesystem); its size
// and CRC-32 are summed as the bytes go out, so nothing is read back.
// The first error is remembered and write() keeps accepting bytes, so a
// producer that cannot unwind mid-stream (LibTorch's archive writer) can
// finish; finish() then throws it.
class CheckedFile {
 public:
  explicit CheckedFile(const fs::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create " + path.string() + ": " + errno_text(errno));
  }
  ~CheckedFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* data, size_t n) {
    crc_ = crc32_update(crc_, data, n);  // in pieces: a tensor record may pass 4 GiB
    sum_.bytes += n;
    const char* p = static_cast<const char*>(data);
    while (error_ == 0 && n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        error_ = errno;
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  FileSum finish() {
    if (error_ == 0 && ::fsync(fd_) != 0) error_ = errno;
    if (::close(fd_) != 0 && error_ == 0) error_ = errno;
    fd_ = -1;
    if (error_ != 0) throw Error("cannot write " + path_.string() + ": " + errno_text(error_));
    sum_.crc = crc_;
    return sum_;
  }

 private:
  fs::path path_;
  int fd_ = -1;
  int error_ = 0;
  uint32_t crc_ = crc32_initial();
  FileSum sum_;
};

FileSum write_text(const fs::path& path, const std::string& text) {
  CheckedFile file(path);
  file.write(text.data(), text.size());
  return file.finish();
}

// LibTorch's own file writer aborts the process on a full disk (its
// destructor throws while unwinding), so archives go through CheckedFile.
FileSum save_archive(torch::serialize::OutputArchive& archive, const fs::path& path) {
  CheckedFile file(path);
  archive.save_to([&](const void* data, size_t n) -> size_t {
    file.write(data, n);
    return n;
  });
  return file.finish();
}

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// A file's size and CRC-32, read back (a resume verifying a checkpoint).
FileSum file_sum(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path.string() + ": " + errno_text(errno));
  FileSum sum;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buffer(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw Error("cannot read " + path.string() + ": " + errno_text(e));
    }
    if (n == 0) break;
    crc = ::crc32(crc, buffer.data(), static_cast<uInt>(n));
    sum.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  sum.crc = static_cast<uint32_t>(crc);
  return sum;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

nlohmann::json describe_sum(const FileSum& sum) { return {{"bytes", sum.bytes}, {"crc32", hex32(sum.crc)}}; }

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

nlohmann::json data_plan(const Recipe& recipe, int64_t train_samples) {
  const auto& data = recipe.resolved.at("data");
  return {{"batch_size", data.at("batch_size")},
          {"sampler", data.at("sampler")},
          {"train", data.at("train")},
          {"train_samples", train_samples}};
}

void check_data_plan(const nlohmann::json& saved, const nlohmann::json& now, const std::string& where, bool allow,
                     bool reshards) {
  if (saved.is_null() || !saved.is_object()) return;  // written before this check existed
  std::vector<std::string> changed;
  auto compare = [&](const std::string& key, const nlohmann::json& a, const nlohmann::json& b) {
    if (a != b) changed.push_back(key + ": " + a.dump() + " in the checkpoint, " + b.dump() + " now");
  };
  if (!reshards) compare("data.batch_size", saved.value("batch_size", nlohmann::json()), now.at("batch_size"));
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

void save_checkpoint(const SaveCheckpointOptions& options) {
  const std::string& dir = options.dir;
  const Position& pos = options.position;
  const Recipe& recipe = *options.recipe;
  const NamedTensors& parameters = options.parameters;
  const NamedTensors& buffers = options.buffers;
  const auto& optimizers = options.optimizers;
  const ProcessGroupPtr& group = options.group;
  const int64_t keep = options.keep;
  const RankState& rank = options.rank;
  const nlohmann::json& plan = options.data_plan;
  const int64_t tuned_bucket_bytes = options.tuned_bucket_bytes;
  const bool leader = group->rank() == 0;
  const int world = group->size();
  const fs::path final_dir = fs::path(dir) / step_name(pos.step);
  const fs::path tmp = fs::path(dir) / ("." + step_name(pos.step) + ".tmp");
  if (leader) {
    bagua::compat::remove_all(tmp);
  }
  barrier(group);
  // Each rank's failure is caught, so that every rank learns of it at the
  // same collective below instead of waiting for a peer that gave up.
  std::string error;
  FileSum rank_sum;
  nlohmann::json files = nlohmann::json::object();
  try {
    fs::create_directories(tmp);
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
    const fs::path rank_file = tmp / ("rank-" + std::to_string(get_rank()) + ".pt");
    rank_sum = save_archive(mine, rank_file);
    if (leader) {
      torch::serialize::OutputArchive model;
      // Host copies: a checkpoint written on GPUs loads anywhere.
      for (const auto& [name, t] : parameters) model.write(name, t.detach().cpu(), /*is_buffer=*/false);
      for (const auto& [name, t] : buffers) model.write(name, t.detach().cpu(), /*is_buffer=*/true);
      files["model.pt"] = describe_sum(save_archive(model, tmp / "model.pt"));
      for (size_t i = 0; i < optimizers.size(); ++i) {
        torch::serialize::OutputArchive opt;
        optimizers[i]->save(opt);
        const std::string name = "optimizer-" + std::to_string(i) + ".pt";
        files[name] = describe_sum(save_archive(opt, tmp / name));
      }
      files["recipe.resolved.yaml"] = describe_sum(write_text(tmp / "recipe.resolved.yaml", resolved_recipe_yaml(recipe)));
    }
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
  // Rank 0 lists every file with its checksum in meta.json, written last:
  // its presence marks the checkpoint complete, its sums catch a torn one.
  std::string leader_error;
  if (leader) {
    try {
      for (int r = 0; r < world; ++r) {
        FileSum sum;
        sum.bytes = static_cast<uint64_t>(all[r][1].item<int64_t>());
        sum.crc = static_cast<uint32_t>(all[r][2].item<int64_t>());
        files["rank-" + std::to_string(r) + ".pt"] = describe_sum(sum);
      }
      nlohmann::json meta = {{"step", pos.step},
                             {"epoch", pos.epoch},
                             {"batch_in_epoch", pos.batch_in_epoch},
                             {"epoch_start", pos.epoch_start},
                             {"world_size", world},
                             {"recipe", recipe.name},
                             {"algorithm", recipe.algorithm.name},
                             {"algorithm_kwargs", recipe.algorithm.kwargs},
                             {"optimizers", optimizers.size()},
                             {"files", files}};
      if (!plan.is_null()) meta["data"] = plan;
      if (!options.progress.is_null()) meta["progress"] = options.progress;
      if (!options.provenance.is_null()) meta["provenance"] = options.provenance;
      // bucket_size: auto's choice, so a resume keeps the same buckets.
      if (tuned_bucket_bytes > 0) meta["tuned_bucket_bytes"] = tuned_bucket_bytes;
      write_text(tmp / "meta.json", meta.dump(2) + "\n");
      fsync_path(tmp);
      // A checkpoint of this step already there (a run that resumed behind
      // it) is moved aside, not removed, before the new one takes its name:
      // at every moment one complete copy exists under a name a resume
      // recovers (recover_interrupted_renames()).
      const fs::path old = fs::path(dir) / ("." + step_name(pos.step) + ".old");
      const bool replacing = fs::exists(final_dir);
      if (replacing) {
        bagua::compat::remove_all(old);
        fs::rename(final_dir, old);
      }
      fs::rename(tmp, final_dir);
      fsync_path(dir);
      if (replacing) bagua::compat::remove_all(old);
    } catch (const std::exception& e) {
      leader_error = e.what();
    }
  }
  broadcast_object(leader_error, 0, group);
  if (!leader_error.empty()) fail("rank 0: " + leader_error);
  if (leader) {
    // Only checkpoints up to this one count: newer ones (left by a run this
    // one resumed behind, e.g. from an explicit older checkpoint) are never
    // pruned.
    std::vector<fs::path> older;
    for (const auto& [step, path] : complete_checkpoints(dir)) {
      if (step <= pos.step) older.push_back(path);
    }
    for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < older.size(); ++i) {
      std::error_code ec;
      bagua::compat::remove_all(older[i], ec);
    }
  }
  barrier(group);  // renamed: on machines without rank 0's filesystem, drop the local leftovers
  if (!leader && get_local_rank() == 0) {
    std::error_code ec;
    bagua::compat::remove_all(tmp, ec);
  }
}

namespace {

// Why the checkpoint at `where` cannot be trusted, or "" when it can; its
// meta.json's text in `meta_text`. Files meta.json lists must have their
// size and CRC-32 (checkpoints from before the sums only need meta.json and
// model.pt). A listed rank-R.pt may be missing: on machines that do not
// share rank 0's filesystem only its own node's are there.
std::string checkpoint_problem_unguarded(const fs::path& where, std::string& meta_text);

// (A meta.json of the right JSON but the wrong shape is a damaged
// checkpoint too, not a crash of the resume.)
std::string checkpoint_problem(const fs::path& where, std::string& meta_text) {
  try {
    return checkpoint_problem_unguarded(where, meta_text);
  } catch (const nlohmann::json::exception& e) {
    return std::string("meta.json is malformed (") + e.what() + ")";
  }
}

std::string checkpoint_problem_unguarded(const fs::path& where, std::string& meta_text) {
  std::ifstream in(where / "meta.json");
  if (!in) return "meta.json cannot be read";
  std::stringstream text;
  text << in.rdbuf();
  meta_text = text.str();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(meta_text);
  } catch (const std::exception&) {
    return "meta.json is not valid JSON (cut short?)";
  }
  for (const char* key : {"step", "epoch", "batch_in_epoch", "world_size", "optimizers"}) {
    if (!meta.is_object() || !meta.contains(key) || !meta[key].is_number_integer()) {
      return std::string("meta.json has no integer '") + key + "'";
    }
  }
  if (!meta.contains("files")) return fs::exists(where / "model.pt") ? "" : "model.pt is missing";
  if (!meta["files"].is_object()) return "meta.json's 'files' is not an object";
  for (auto it = meta["files"].begin(); it != meta["files"].end(); ++it) {
    const fs::path file = where / it.key();
    if (!fs::exists(file)) {
      if (it.key().rfind("rank-", 0) == 0) continue;
      return it.key() + " is missing";
    }
    const auto& want = it.value();
    if (!want.is_object()) return "meta.json's entry for " + it.key() + " is not an object";
    if (!want.contains("bytes") || !want["bytes"].is_number_unsigned()) {
      return "meta.json gives no byte count for " + it.key();
    }
    if (!want.contains("crc32") || !want["crc32"].is_string()) return "meta.json gives no CRC-32 for " + it.key();
    FileSum got;
    try {
      got = file_sum(file);
    } catch (const std::exception& e) {
      return e.what();
    }
    if (want.value("bytes", uint64_t{0}) != got.bytes) {
      return it.key() + " has " + std::to_string(got.bytes) + " bytes, meta.json says " + want.value("bytes", nlohmann::json()).dump();
    }
    if (want.value("crc32", std::string()) != hex32(got.crc)) {
      return it.key() + "'s CRC-32 is " + hex32(got.crc) + ", meta.json says " + want.value("crc32", std::string("?"));
    }
  }
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
      std::string meta_text;
      if (!fs::exists(final_dir) && checkpoint_problem(path, meta_text).empty()) {
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

std::optional<Position> resume_checkpoint(const std::string& dir, const std::string& path,
                                          const std::vector<std::pair<std::string, at::Tensor>>& parameters,
                                          const std::vector<std::pair<std::string, at::Tensor>>& buffers,
                                          const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                                          const ProcessGroupPtr& group, std::string* chosen,
                                          nlohmann::json* meta_out, const MetaCheck& verify) {
  // Rank 0 picks a checkpoint that verifies and tells the others:
  // {"where", "meta"} or {"error"}.
  std::string decision = "{}";
  if (group->rank() == 0) {
    nlohmann::json d = nlohmann::json::object();
    recover_interrupted_saves(dir);
    if (!path.empty()) {
      std::string meta_text;
      std::string problem = checkpoint_problem(path, meta_text);
      if (problem.empty()) {
        d = {{"where", path}, {"meta", meta_text}};
      } else {
        d["error"] = "checkpoint " + path + " cannot be resumed: " + problem +
                     ". Name another checkpoint in checkpoint.resume, or use auto to take the newest intact one";
      }
    } else {
      auto all = complete_checkpoints(dir);
      std::vector<std::pair<fs::path, std::string>> damaged;
      for (auto it = all.rbegin(); it != all.rend(); ++it) {
        std::string meta_text;
        std::string problem = checkpoint_problem(it->second, meta_text);
        if (problem.empty()) {
          d = {{"where", it->second.string()}, {"meta", meta_text}};
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
    }
    decision = d.dump();
  }
  broadcast_object(decision, 0, group);
  const nlohmann::json d = nlohmann::json::parse(decision);
  if (d.contains("error")) throw Error(d["error"].get<std::string>(), true);
  if (!d.contains("where")) return std::nullopt;
  const std::string where = d["where"].get<std::string>();
  auto meta = nlohmann::json::parse(d["meta"].get<std::string>());
  if (meta_out) *meta_out = meta;
  if (meta.at("optimizers").get<size_t>() != optimizers.size()) {
    throw Error("checkpoint " + where + " has state for " + meta.at("optimizers").dump() +
                    " optimizers, the recipe defines " + std::to_string(optimizers.size()),
                true);
  }
  if (verify) verify(where, meta);  // before any state is loaded
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
  const auto start = meta.find("epoch_start");
  return Position{meta.at("step").get<int64_t>(), meta.at("epoch").get<int64_t>(),
                  meta.at("batch_in_epoch").get<int64_t>(),
                  start != meta.end() && start->is_number_integer() ? start->get<int64_t>() : 0};
}

void load_rank_state(const std::string& where, const NamedTensors& parameters, const NamedTensors& buffers,
                     const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers,
                     const RankState& rank, bool rng_only) {
  const fs::path file = fs::path(where) / ("rank-" + std::to_string(get_rank()) + ".pt");
  if (!fs::exists(file) && !rng_only && (rank.model || rank.load_algorithm)) {
    // Listed but absent: written on another machine (checkpoints of several
    // machines need one shared directory). Never silent: this rank goes on
    // with rank 0's model and optimizer state.
    std::ifstream in(fs::path(where) / "meta.json");
    nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (meta.is_object() && meta.contains("files") && meta["files"].is_object() &&
        meta["files"].contains(file.filename().string())) {
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
