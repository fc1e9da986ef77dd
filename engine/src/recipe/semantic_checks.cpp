// Rules a JSON Schema cannot express: files that must exist, byte sizes,
// and the combinations of settings Bagua's algorithms require.
#include "stages.h"

#include <bagua/algorithms/catalog.h>
#include <bagua/data_files.h>
#include <bagua/model_file.h>
#include <bagua/recipe_key_path.h>

#include <filesystem>
#include <optional>
#include <set>

namespace bagua::recipe {
namespace fs = std::filesystem;

namespace {

// o[key], or null when absent. These checks also run on recipes the schema
// rejected (every error is reported at once), so a value may have any type:
// compare it as JSON, never read it as a type it may not have.
const json& field(const json& o, const char* key) {
  static const json kNone;
  if (!o.is_object()) return kNone;
  auto it = o.find(key);
  return it == o.end() ? kNone : *it;
}

// A number, or `fallback` when absent; nullopt when present but not a number.
std::optional<double> number_or(const json& v, double fallback) {
  if (v.is_null()) return fallback;
  if (v.is_number()) return v.get<double>();
  return std::nullopt;
}


struct Checker {
  SourceTree& tree;
  const SemanticOptions& options;
  Diagnostics& diags;
  Diagnostics& notes;

  void error(const std::string& path, const std::string& message) {
    diags.add(tree.locate(path), path, message);
  }

  // The value at `path`, or nullptr.
  const json* at(const std::string& path) const { return KeyPath::parse(path).find(tree.doc); }
  json* at(const std::string& path) { return KeyPath::parse(path).find(tree.doc); }

  // Relative paths are relative to the recipe file that wrote them (an
  // override's, to the working directory).
  fs::path resolve_path(const std::string& path, const std::string& value) {
    fs::path p(value);
    SourcePos where = tree.locate(path);
    if (p.is_relative() && where.file.rfind("--set ", 0) != 0)
      p = fs::path(where.file).parent_path() / p;
    return fs::absolute(p).lexically_normal();
  }

  // Where a relative path at `path` was taken from, for a not-found error:
  // the recipe file's directory, or an override's working directory.
  std::string relative_hint(const std::string& path) const {
    return tree.locate(path).file.rfind("--set ", 0) == 0
               ? " (an override's relative paths are relative to the working directory)"
               : " (relative paths are relative to the recipe file)";
  }

  void check_files(const std::vector<std::string>& paths) {
    for (const auto& path : paths) {
      json* value = at(path);
      if (value == nullptr || !value->is_string()) continue;  // the schema reports the type
      fs::path p = resolve_path(path, value->get<std::string>());
      if (options.check_files) {
        std::error_code ec;
        if (!fs::exists(p, ec)) {
          error(path, "file not found: " + p.string() + relative_hint(path));
        } else if (fs::is_directory(p, ec)) {
          error(path, "expected a file, found a directory: " + p.string());
        } else if (path == "model.torchscript") {
          if (const std::string why = torchscript_file_problem(p.string()); !why.empty()) {
            error(path, "expected a TorchScript file, found " + p.string() + ": " + why + "; " + kTorchScriptExportHint);
          }
        }
      }
      *value = p.string();
    }
  }

  // Each path value made absolute (relative to the recipe that wrote it),
  // after `check` looked at it when files are checked.
  template <typename Check>
  void resolve_paths(const std::vector<std::string>& paths, Check check) {
    for (const auto& path : paths) {
      json* value = at(path);
      if (value == nullptr || !value->is_string()) continue;  // the schema reports the type
      fs::path p = resolve_path(path, value->get<std::string>());
      if (options.check_files) check(path, p);
      *value = p.string();
    }
  }

  // Directories (an image folder's root) must exist.
  void check_dirs(const std::vector<std::string>& paths) {
    resolve_paths(paths, [this](const std::string& path, const fs::path& p) {
      std::error_code ec;
      if (!fs::exists(p, ec)) {
        error(path, "directory not found: " + p.string() + relative_hint(path));
      } else if (!fs::is_directory(p, ec)) {
        error(path, "expected a directory, found a file: " + p.string());
      }
    });
  }

  // Files or patterns of files (token shards): a file must exist, a pattern
  // match at least one.
  void check_globs(const std::vector<std::string>& paths) {
    resolve_paths(paths, [this](const std::string& path, const fs::path& p) {
      std::error_code ec;
      if (has_wildcard(p.string())) {
        std::vector<std::string> unmatched;
        expand_file_patterns({p.string()}, &unmatched);
        if (!unmatched.empty())
          error(path, "no file matches " + p.string() + relative_hint(path));
      } else if (!fs::exists(p, ec)) {
        error(path, "file not found: " + p.string() + relative_hint(path));
      } else if (fs::is_directory(p, ec)) {
        error(path, "expected a file or a file pattern, found a directory: " + p.string() + " (its files: " +
                        (p / "*.bin").string() + ")");
      }
    });
  }

  // What only the files can say about a streamed source, cheaply: token
  // files whose size is a whole number of ids and that hold a sample;
  // image folders with a class and no empty one. (check_files only; after
  // check_globs and check_dirs made the paths absolute.)
  void check_streamed_source(const std::string& key) {
    const json* source = at(key);
    if (!options.check_files || !source || !source->is_object()) return;
    const json& format = field(*source, "format");
    if (format == "tokens") {
      const json& path = field(*source, "path");
      std::vector<std::string> patterns;
      if (path.is_string()) patterns.push_back(path.get<std::string>());
      for (const auto& p : path.is_array() ? path : json::array())
        if (p.is_string()) patterns.push_back(p.get<std::string>());
      const json& dtype = field(*source, "dtype");
      const int64_t width = dtype == "uint32" ? 4 : 2;
      const json& context = field(*source, "context");
      const json& stride_value = field(*source, "stride");
      if (!context.is_number_integer() || context.get<int64_t>() < 1) return;
      const int64_t n = context.get<int64_t>();
      const int64_t stride = stride_value.is_number_integer() && stride_value.get<int64_t>() > 0
                                 ? stride_value.get<int64_t>() : n;
      int64_t samples = 0;
      bool all_read = true;
      for (const auto& file : expand_file_patterns(patterns)) {
        std::error_code ec;
        const auto bytes = fs::file_size(file, ec);
        if (ec) {
          all_read = false;
          continue;  // check_globs said why
        }
        if (bytes % static_cast<uintmax_t>(width) != 0) {
          error(key + ".path", file + " has " + std::to_string(bytes) + " bytes, not a whole number of " +
                                   dtype.get<std::string>() + " token ids (" + std::to_string(width) +
                                   " bytes each): is dtype right?");
          all_read = false;
          continue;
        }
        const int64_t tokens = static_cast<int64_t>(bytes) / width;
        if (tokens > n) samples += (tokens - n - 1) / stride + 1;
      }
      if (all_read && samples == 0)
        error(key + ".context", "no file holds context + 1 = " + std::to_string(n + 1) +
                                    " tokens, so there is no sample (expected a smaller context or more tokens)");
    } else if (format == "image_folder") {
      const json& root = field(*source, "path");
      std::error_code ec;
      if (!root.is_string() || !fs::is_directory(root.get<std::string>(), ec)) return;  // check_dirs said why
      try {
        const ImageFolderListing listing = list_image_folder(root.get<std::string>(), false);
        if (listing.classes.empty()) {
          error(key + ".path", "no class directory in " + root.get<std::string>() +
                                   " (expected ROOT/CLASS/IMAGE.jpg or .png, one directory per class)");
        } else if (!listing.empty_classes.empty()) {
          error(key + ".path", "class directory " + (fs::path(root.get<std::string>()) / listing.empty_classes[0]).string() +
                                   " holds no .jpg, .jpeg or .png image" +
                                   (listing.empty_classes.size() > 1
                                        ? " (nor do " + std::to_string(listing.empty_classes.size() - 1) + " more)"
                                        : std::string()) +
                                   "; every class needs one (remove the directory or add its images)");
        }
      } catch (const std::exception& e) {
        error(key + ".path", e.what());
      }
    }
  }

  // image_folder: C of [C, H, W] is 1 or 3; augmentations are for training.
  void check_image_folder(const std::string& key) {
    const json* source = at(key);
    if (!source || !source->is_object() || field(*source, "format") != "image_folder") return;
    const json& shape = field(*source, "input_shape");
    if (shape.is_array() && shape.size() == 3 && shape[0].is_number_integer() && shape[0] != 1 && shape[0] != 3)
      error(key + ".input_shape", "expected 1 (gray) or 3 (RGB) channels first, found " + shape[0].dump());
    if (key == "data.eval") {
      if (field(*source, "random_flip") == true)
        error("data.eval.random_flip", "augmentation is for training only: evaluation sees each image as it is "
                                       "(expected false or absent, found true)");
      if (field(*source, "random_crop").is_object())
        error("data.eval.random_crop", "augmentation is for training only: evaluation sees each image centre-cropped "
                                       "(expected null or absent)");
    }
  }

  // Sizes are parsed here, once: a valid one is replaced by its number of
  // bytes, which is what the typed Recipe reads.
  void check_sizes(const std::vector<std::string>& paths) {
    for (const auto& path : paths) {
      json* found = at(path);
      if (found == nullptr) continue;  // the walker found it: never
      json& v = *found;
      std::string text = v.is_string() ? v.get<std::string>() : v.dump();
      if (text == "auto" && path == "algorithm.bucket_size") {
        const json* name = at("algorithm.name");
        const AlgorithmDescriptor* algorithm =
            name && name->is_string() ? find_algorithm(name->get<std::string>()) : nullptr;
        if (algorithm && algorithm->traits.keeps_bucket_state)
          error(path, "bucket_size auto tries bucket sizes by re-bucketing during the first steps, which would reset " +
                      algorithm->name + "'s per-bucket state (expected a size such as 10MiB, found auto)");
        continue;
      }
      std::optional<int64_t> bytes = parse_byte_size(text);
      if (!bytes) error(path, "size out of range (expected at most 2^62 bytes, found " + json_quote(text) + ")");
      else if (*bytes == 0) error(path, "expected a size of at least 1 byte, found " + json_quote(text));
      else v = *bytes;
    }
  }

  void check_sampler() {
    const json* type = at("data.sampler.type");
    const json* format = at("data.train.format");
    if (!type || !format || *type != "load_balancing") return;
    if (*format == "idx" || *format == "tensors" || *format == "tokens")
      error("data.sampler.type", "the load_balancing sampler needs a per-sample complexity, which " +
            format->get<std::string>() + " data does not have (expected data.train.format csv, jsonl or "
            "image_folder, found " + format->get<std::string>() + ")");
    const json* field_name = at("data.sampler.complexity_field");
    if (*format == "image_folder" && field_name && field_name->is_string() && *field_name != "file_size")
      error("data.sampler.complexity_field", "an image folder's one per-sample field is file_size, each image "
            "file's size in bytes (expected file_size, found " + field_name->get<std::string>() + ")");
  }

  // train.precision: fp16 needs a GPU: refused when the recipe says CPUs
  // (train.device: auto is checked when the run starts).
  void check_precision() {
    const json* precision = at("train.precision");
    const json* device = at("train.device");
    if (precision && *precision == "fp16" && device && *device == "cpu")
      error("train.precision", "fp16 runs on GPUs only and train.device is cpu (expected fp32 or bf16, which CPUs "
            "run, or train.device cuda or auto, found fp16)");
    const json* algorithm = at("algorithm.name");
    if (precision && *precision == "fp16" && algorithm && *algorithm == "qadam")
      error("train.precision", "qadam folds each gradient into its momentum during backward, before fp16's loss "
            "scale can be taken out of it (expected fp32 or bf16 with qadam, found fp16)");
  }

  // train.global_batch_size against the recipe's world: every worker needs
  // a sample a step, and the load_balancing sampler's ranks equal batches.
  // (A launch at another size is checked again when it starts.)
  void check_global_batch() {
    const json* global = at("train.global_batch_size");
    const json* accum = at("train.grad_accum_steps");
    if (accum && accum->is_number_integer() && accum->get<int64_t>() > 1) {
      if (global && global->is_number_integer())
        error("train.grad_accum_steps", "train.global_batch_size already fixes the samples of a step; with "
              "accumulation the global batch is data.batch_size x workers x grad_accum_steps (expected 1 with "
              "global_batch_size, or global_batch_size null, found " + accum->dump() + ")");
      if (const json* budget = at("data.sampler.batch_complexity"); budget && budget->is_number())
        error("train.grad_accum_steps", "variable-size batches (data.sampler.batch_complexity) are not cut into "
              "micro-batches (expected 1, found " + accum->dump() + ")");
    }
    const json* nproc = at("distributed.nproc_per_node");
    const json* nnodes = at("distributed.nnodes");
    if (!global || !global->is_number_integer() || !nproc || !nnodes || !nproc->is_number_integer() ||
        !nnodes->is_number_integer()) {
      return;
    }
    const int64_t g = global->get<int64_t>(), world = nproc->get<int64_t>() * nnodes->get<int64_t>();
    if (g < world) {
      error("train.global_batch_size", "expected at least one sample per worker, at least " + std::to_string(world) +
                                           " (distributed.nnodes x nproc_per_node), found " + std::to_string(g));
      return;
    }
    const json* type = at("data.sampler.type");
    if (type && *type == "load_balancing" && g % world != 0) {
      error("train.global_batch_size", "expected a multiple of the " + std::to_string(world) +
                                           " workers with the load_balancing sampler (its ranks' batches must "
                                           "match in size), found " + std::to_string(g));
    }
  }

  // What the algorithm's descriptor says it cannot run with these keyword
  // arguments on this world (decentralized's shift_one with an odd number
  // of peers, say).
  void check_algorithm_world() {
    const json* name = at("algorithm.name");
    const json* algorithm_tree = at("algorithm");
    const json* nproc = at("distributed.nproc_per_node");
    const json* nnodes = at("distributed.nnodes");
    if (!name || !name->is_string() || !algorithm_tree || !algorithm_tree->is_object()) return;
    if (!nproc || !nnodes || !nproc->is_number_integer() || !nnodes->is_number_integer()) return;
    const AlgorithmDescriptor* algorithm = find_algorithm(name->get<std::string>());
    if (!algorithm || !algorithm->check_world) return;
    json given = json::object();
    // A value of the wrong kind is the schema's to report; the descriptor
    // sees only values of its defaults' kinds, with auto decided.
    for (const auto& [key, value] : algorithm_tree->items()) {
      if (algorithm->defaults.contains(key) && kwarg_fits(key, algorithm->defaults[key], value)) given[key] = value;
    }
    const int node_count = static_cast<int>(nnodes->get<int64_t>());
    const json kwargs = resolve_kwargs(algorithm->name, given, node_count);
    if (auto problem = algorithm->check_world(kwargs, node_count, static_cast<int>(nproc->get<int64_t>()))) {
      error("algorithm." + problem->key, problem->message);
    }
  }

  // An optimizer type that an algorithm requires (AlgorithmTraits::
  // required_optimizer) goes with that algorithm alone, and that algorithm
  // with exactly one optimizer, of that type.
  void check_required_optimizer() {
    const json* name = at("algorithm.name");
    const json* optimizers = at("optimizers");
    if (!name || !name->is_string() || !optimizers || !optimizers->is_array()) return;
    const AlgorithmDescriptor* algorithm = find_algorithm(name->get<std::string>());
    const std::string required = algorithm ? algorithm->traits.required_optimizer : "";
    size_t required_count = 0;
    for (size_t i = 0; i < optimizers->size(); ++i) {
      const json& o = (*optimizers)[i];
      if (!o.is_object() || !o.contains("type")) continue;
      const std::string type = o["type"].is_string() ? o["type"].get<std::string>() : "";
      if (!required.empty() && type == required) {
        ++required_count;
      } else if (!required.empty()) {
        error(index_path("optimizers", i) + ".type",
              "algorithm " + algorithm->name + " needs its optimizer to be of type " + required + " (expected " +
                  required + ", found " + o["type"].dump() + ")");
      } else if (const AlgorithmDescriptor* owner = find_optimizer_owner(type)) {
        error(index_path("optimizers", i) + ".type",
              "the " + type + " optimizer only works with algorithm.name: " + owner->name + " (found algorithm " +
                  name->dump() + "), " + owner->optimizer.only_with_its_algorithm_because);
      }
    }
    if (!required.empty() && optimizers->size() > 1 && required_count == optimizers->size())
      error("optimizers", "algorithm " + algorithm->name + " drives exactly one optimizer (expected 1, found " +
            std::to_string(optimizers->size()) + ")");
  }

  // Bagua: a fused optimizer and with_bagua both reset parameter storage, so
  // with a fused optimizer buckets must not be flattened (do_flatten=False).
  void check_fused() {
    const json* optimizers = at("optimizers");
    for (size_t i = 0; optimizers && optimizers->is_array() && i < optimizers->size(); ++i) {
      const json& o = (*optimizers)[i];
      if (!o.is_object() || field(o, "fused") != true || !field(o, "type").is_string()) continue;
      const std::string type = field(o, "type").get<std::string>();
      if (const AlgorithmDescriptor* owner = find_optimizer_owner(type)) {
        error(index_path("optimizers", i) + ".fused",
              "a " + type + " optimizer cannot be fused: " + owner->optimizer.not_fused_because +
                  " (expected false, found true; fuse sgd, adam, adamw, rmsprop or adagrad)");
      }
    }
    json* flatten = tree.doc.contains("algorithm") && tree.doc["algorithm"].is_object() &&
                    tree.doc["algorithm"].contains("flatten") ? &tree.doc["algorithm"]["flatten"] : nullptr;
    if (!optimizers || !optimizers->is_array() || !flatten || *flatten != true) return;
    for (size_t i = 0; i < optimizers->size(); ++i) {
      const json& o = (*optimizers)[i];
      if (!o.is_object() || field(o, "fused") != true) continue;
      std::string fused_at = index_path("optimizers", i) + ".fused";
      if (tree.written("algorithm.flatten")) {
        error("algorithm.flatten",
              "flatten: true conflicts with " + fused_at + ": true (Bagua: a fused optimizer and flattened "
              "buckets both re-home parameters, so use flatten: false with fused optimizers; expected false, found true)");
      } else {
        *flatten = false;
        notes.add(tree.locate(fused_at), "algorithm.flatten",
                  "set to false because " + fused_at + " is true (Bagua advises do_flatten=False with a fused optimizer)");
      }
      return;
    }
  }

  void check_optimizers() {
    const json* optimizers = at("optimizers");
    if (!optimizers || !optimizers->is_array()) return;
    std::map<std::string, size_t> first;
    for (size_t i = 0; i < optimizers->size(); ++i) {
      const json& o = (*optimizers)[i];
      if (!o.is_object()) continue;
      std::string at_i = index_path("optimizers", i);
      const auto momentum = number_or(field(o, "momentum"), 0.0);
      const auto dampening = number_or(field(o, "dampening"), 0.0);
      if (field(o, "type") == "sgd" && field(o, "nesterov") == true && momentum && dampening &&
          (*momentum <= 0.0 || *dampening != 0.0))
        error(at_i + ".nesterov", "nesterov momentum needs momentum > 0 and dampening 0 (found momentum " +
              o.value("momentum", json(0)).dump() + ", dampening " + o.value("dampening", json(0)).dump() + ")");
      if (optimizers->size() > 1 && o.contains("params")) {
        std::string key = o["params"].dump();
        auto [it, fresh] = first.emplace(key, i);
        if (!fresh)
          error(at_i + ".params", "optimizers[" + std::to_string(it->second) + "] already takes params " + key +
                " (each optimizer needs its own parameters; set params globs that do not overlap)");
      }
    }
  }

  void check_layout() {
    const json* rank = at("distributed.node_rank");
    const json* nnodes = at("distributed.nnodes");
    if (nnodes && nnodes->is_string()) {
      // "MIN:MAX" (the schema checked its form).
      const std::string text = nnodes->get<std::string>();
      const auto colon = text.find(':');
      if (colon != std::string::npos && text.find_first_not_of("0123456789:") == std::string::npos &&
          colon > 0 && colon + 1 < text.size() && text.size() < 16 &&
          std::stoll(text.substr(0, colon)) > std::stoll(text.substr(colon + 1))) {
        error("distributed.nnodes", "expected \"MIN:MAX\" with MIN no larger than MAX, found \"" + text + "\"");
      }
      return;
    }
    if (rank && nnodes && rank->is_number_integer() && nnodes->is_number_integer() &&
        rank->get<int64_t>() >= nnodes->get<int64_t>())
      error("distributed.node_rank", "expected a node rank from 0 to nnodes - 1 = " +
            std::to_string(nnodes->get<int64_t>() - 1) + ", found " + rank->dump());
  }

  // NCCL communicates GPU memory only: a CPU run on it would stage every
  // tensor through the GPU for nothing.
  void check_device() {
    const json* device = at("train.device");
    const json* backend = at("distributed.backend");
    if (device && backend && *device == "cpu" && *backend == "nccl")
      error(tree.written("distributed.backend") ? "distributed.backend" : "train.device",
            "backend nccl needs the workers on GPUs (train.device cuda or auto); with train.device cpu use "
            "backend gloo or auto");
  }

  void check_resume() {
    json* resume = tree.doc.contains("checkpoint") && tree.doc["checkpoint"].is_object() &&
                   tree.doc["checkpoint"].contains("resume") ? &tree.doc["checkpoint"]["resume"] : nullptr;
    if (!resume || !resume->is_string() || *resume == "auto" || *resume == "never") return;
    fs::path p = resolve_path("checkpoint.resume", resume->get<std::string>());
    if (options.check_files && !fs::exists(p))
      error("checkpoint.resume", "checkpoint not found: " + p.string() + " (expected auto, never, or an existing checkpoint)");
    *resume = p.string();
  }

  void check_eval() {
    const json* eval = at("data.eval");
    if ((!eval || eval->is_null()) && tree.written("train.eval_every")) {
      const json* every = at("train.eval_every");
      if (every && *every != "never")
        notes.add(tree.locate("train.eval_every"), "train.eval_every", "no data.eval is set, so nothing is evaluated");
    }
    // Normalized training inputs and raw evaluation inputs: the model would
    // be evaluated on data scaled otherwise than it trained on.
    const json* train_norm = at("data.train.normalize");
    const json* eval_norm = at("data.eval.normalize");
    if (eval && eval->is_object() && train_norm && eval_norm && *train_norm != *eval_norm &&
        at("data.train.format") && at("data.eval.format") && *at("data.train.format") == *at("data.eval.format")) {
      const std::string key = tree.written("data.train.normalize") ? "data.train.normalize" : "data.eval.normalize";
      notes.add(tree.locate(key), key,
                "data.train.normalize is " + train_norm->dump() + " but data.eval.normalize is " + eval_norm->dump() +
                    ": the model is evaluated on inputs scaled otherwise than it trained on; set both the same");
    }
  }

  // checkpoint.keep_best and train.early_stop judge evaluations: there must
  // be some, and they must report the figure watched. keep_best: true and an
  // unwritten mode are resolved here, so the resolved recipe says them.
  void check_eval_goals() {
    const std::pair<std::string, const char*> goals[] = {
        {"checkpoint.keep_best", "keeps the model of the best evaluation"},
        {"train.early_stop", "ends the run when evaluations stop improving"}};
    for (const auto& [key, what] : goals) {
      json* goal = at(key);
      if (goal && *goal == true && key == "checkpoint.keep_best") {
        *goal = json{{"metric", to_string(EvalMetric::kEvalLoss)}};
      }
      if (!goal || !goal->is_object()) continue;  // off (false, null), or the schema says what is wrong
      const json* eval = at("data.eval");
      const json* every = at("train.eval_every");
      if (!eval || eval->is_null()) {
        error(key, std::string(what) + ", but no data.eval is set, so nothing is evaluated (expected a data.eval, "
                       "or no " + key + ")");
      } else if (every && *every == "never") {
        error(key, std::string(what) + ", but train.eval_every is never (expected epoch or a number of steps)");
      }
      const json& metric = field(*goal, "metric");
      const auto watched = metric.is_string() ? enum_from_string<EvalMetric>(metric.get<std::string>()) : std::nullopt;
      if (!watched) continue;
      const json* loss = at("model.loss");
      const auto loss_type =
          loss && loss->is_string() ? enum_from_string<Loss>(loss->get<std::string>()) : std::nullopt;
      if (*watched == EvalMetric::kEvalAccuracy && loss_type && !is_classification(*loss_type)) {
        error(key + ".metric", "evaluations measure eval_accuracy with model.loss cross_entropy or nll only "
                               "(expected eval_loss with model.loss " + loss->get<std::string>() +
                               ", found eval_accuracy)");
      } else if (*watched == EvalMetric::kEvalPerplexity && loss_type && *loss_type != Loss::kCrossEntropy) {
        error(key + ".metric", "evaluations measure eval_perplexity with model.loss cross_entropy over token "
                               "sequences only (expected eval_loss with model.loss " + loss->get<std::string>() +
                               ", found eval_perplexity)");
      }
      if (!goal->contains("mode")) (*goal)["mode"] = to_string(default_mode(*watched));
    }
  }
};

}  // namespace

void check_semantics(SourceTree& tree, const SchemaFindings& findings, const SemanticOptions& options,
                     Diagnostics& diags, Diagnostics& notes) {
  Checker c{tree, options, diags, notes};
  c.check_files(findings.file_paths);
  c.check_dirs(findings.dir_paths);
  c.check_globs(findings.glob_paths);
  for (const char* key : {"data.train", "data.eval"}) {
    c.check_image_folder(key);
    c.check_streamed_source(key);
  }
  c.check_sizes(findings.size_paths);
  c.check_sampler();
  c.check_global_batch();
  c.check_precision();
  c.check_algorithm_world();
  c.check_required_optimizer();
  c.check_fused();
  c.check_optimizers();
  c.check_layout();
  c.check_device();
  check_data_source_columns(tree, "data.train", diags);
  check_data_source_columns(tree, "data.eval", diags);
  c.check_resume();
  c.check_eval();
  c.check_eval_goals();
}

}  // namespace bagua::recipe
