// The recipe half of provenance.json, and the resume's comparison
// (bagua/provenance.h).
#include <bagua/data_files.h>
#include <bagua/errors.h>
#include <bagua/provenance.h>
#include <bagua/recipe_catalog.h>
#include <bagua/recipe_key_path.h>
#include <bagua/sha256.h>
#include <bagua/version.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include <filesystem>

namespace bagua {

std::string canonical_recipe_sha256(const nlohmann::json& resolved) { return sha256_hex(resolved.dump()); }

namespace {

nlohmann::json file_record(const std::string& path) {
  struct stat st {};
  int64_t size = ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
  // A large file takes a while to hash the first time: say so.
  auto announce = [&path](int64_t bytes) {
    if (bytes >= (int64_t{256} << 20))
      std::fprintf(stderr, "provenance: hashing %s (%.1f GiB) once; later runs take its SHA-256 from the cache\n",
                   path.c_str(), double(bytes) / double(int64_t{1} << 30));
  };
  return {{"path", path}, {"size", size}, {"sha256", cached_file_sha256(path, nullptr, announce)}};
}

// An image folder by its listing: each image's path under the root, size
// and modification time (hashing the pixels of every image at every start
// would cost more than a short run).
nlohmann::json image_folder_record(const std::string& root) {
  nlohmann::json rec = {{"path", root}};
  try {
    const ImageFolderListing listing = list_image_folder(root, true);
    std::string lines;
    for (size_t i = 0; i < listing.files.size(); ++i) {
      struct stat st {};
      const long long mtime = ::stat(listing.files[i].c_str(), &st) == 0 ? static_cast<long long>(st.st_mtime) : -1;
      lines += listing.files[i].substr(std::min(listing.files[i].size(), root.size())) + "\t" +
               std::to_string(listing.sizes[i]) + "\t" + std::to_string(mtime) + "\n";
    }
    rec["classes"] = listing.classes.size();
    rec["images"] = listing.files.size();
    rec["listing_sha256"] = sha256_hex(lines);
  } catch (const std::exception& e) {
    rec["error"] = e.what();
  }
  return rec;
}

}  // namespace

nlohmann::json recipe_provenance(const Recipe& recipe) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : recipe.origin.files) files.push_back({{"path", f.path}, {"sha256", f.sha256}});
  nlohmann::json origins = nlohmann::json::object();
  for (const auto& [key, where] : recipe.origin.values) origins[key] = where.to_string();
  nlohmann::json p;
  p["format"] = kProvenanceFormat;
  p["recipe"] = {{"sha256", canonical_recipe_sha256(recipe.resolved)},
                 {"source", recipe.source},
                 {"files", files},
                 {"overrides", recipe.origin.overrides},
                 {"env_names", recipe.origin.env_names},
                 {"origins", origins},
                 {"resolved", recipe.resolved}};
  p["model"] = file_record(recipe.model.torchscript);
  nlohmann::json data = nlohmann::json::array();
  for (const auto& key : recipe.origin.file_keys) {
    if (key == "model.torchscript") continue;
    std::string error;
    const std::optional<KeyPath> path = KeyPath::parse(key, error);
    const nlohmann::json* v = path ? path->find(recipe.resolved) : nullptr;
    if (!v || !v->is_string()) continue;
    nlohmann::json rec = file_record(v->get<std::string>());
    rec["key"] = key;
    data.push_back(rec);
  }
  // The streamed formats: every token file (each hashed once, then cached),
  // an image folder's listing.
  auto streamed = [&](const char* key, const DataSource& source) {
    if (source.format == DataFormat::kTokens) {
      for (const auto& file : expand_file_patterns(source.shards)) {
        nlohmann::json rec = file_record(file);
        rec["key"] = std::string(key) + ".path";
        data.push_back(rec);
      }
    } else if (source.format == DataFormat::kImageFolder) {
      nlohmann::json rec = image_folder_record(source.path);
      rec["key"] = std::string(key) + ".path";
      data.push_back(rec);
    }
  };
  streamed("data.train", recipe.data.train);
  if (recipe.data.eval) streamed("data.eval", *recipe.data.eval);
  p["data"] = data;
  p["bagua"] = {{"version", version()}, {"revision", source_revision()}};
  return p;
}

bool recipe_key_changes_training(const std::string& key_path) {
  static const char* const kIgnored[] = {
      "name", "description", "schema_version", "output", "checkpoint", "distributed", "data",
      "train.epochs", "train.max_steps", "train.early_stop", "train.log_every_steps", "train.eval_every", "train.threads",
      "train.allocator", "model.torchscript"};
  for (const char* k : kIgnored)
    if (KeyPath::is_same_or_under(key_path, k)) return false;
  // How the same arithmetic is carried out: fused updates (bitwise equal to
  // unfused ones), flattened buckets and their size.
  if (KeyPath::is_same_or_under(key_path, "algorithm.flatten") ||
      KeyPath::is_same_or_under(key_path, "algorithm.bucket_size"))
    return false;
  std::string error;
  if (const std::optional<KeyPath> path = KeyPath::parse(key_path, error)) {
    const auto& steps = path->steps();
    if (steps.size() == 3 && steps[0].key == "optimizers" && steps[1].is_index() && steps[2].key == "fused")
      return false;
  }
  return true;
}

std::string short_json(const nlohmann::json& value, size_t max_chars) {
  std::string s = value.dump();
  if (s.size() > max_chars) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

ProvenanceCheck compare_provenance(const nlohmann::json& saved, const nlohmann::json& now) {
  ProvenanceCheck check;
  if (!saved.is_object()) return check;
  auto str = [](const nlohmann::json& j, const char* a, const char* b) -> std::string {
    if (!j.contains(a) || !j[a].is_object() || !j[a].contains(b) || !j[a][b].is_string()) return "";
    return j[a][b].get<std::string>();
  };
  const std::string saved_model = str(saved, "model", "sha256"), now_model = str(now, "model", "sha256");
  if (!saved_model.empty() && !now_model.empty() && saved_model != now_model)
    check.model.push_back("the model file " + str(now, "model", "path") + " has SHA-256 " + now_model +
                          "; the checkpoint's run used " + str(saved, "model", "path") + " with " + saved_model);
  if (saved.contains("recipe") && saved["recipe"].contains("resolved") && now.contains("recipe") &&
      now["recipe"].contains("resolved")) {
    for (const auto& d : diff_resolved(saved["recipe"]["resolved"], now["recipe"]["resolved"])) {
      if (!recipe_key_changes_training(d.path)) continue;
      check.recipe.push_back(d.path + ": " + (d.a ? short_json(*d.a) : std::string("(absent)")) +
                             " in the checkpoint, " + (d.b ? short_json(*d.b) : std::string("(absent)")) + " now");
    }
  }
  const std::string saved_version = str(saved, "bagua", "version"), now_version = str(now, "bagua", "version");
  if (!saved_version.empty() && saved_version != now_version)
    check.warnings.push_back("the checkpoint was written by bagua " + saved_version + " (" +
                             str(saved, "bagua", "revision") + "), this is bagua " + now_version);
  return check;
}

}  // namespace bagua
