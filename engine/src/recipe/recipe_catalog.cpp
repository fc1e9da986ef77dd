// The recipe catalog, pinning, standalone copies and key-by-key diffs
// (bagua/recipe_catalog.h). Torch-free: it serves `bagua recipes` and
// `bagua diff`, which start in milliseconds.
#include "stages.h"

#include <bagua/errors.h>
#include <bagua/recipe_catalog.h>
#include <bagua/recipe_key_path.h>
#include <bagua/sha256.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#ifndef BAGUA_SOURCE_RECIPES
#define BAGUA_SOURCE_RECIPES ""
#endif

namespace bagua {
namespace fs = std::filesystem;
using recipe::json;

namespace {

// The shipped recipes: beside the installed executable (bin/bagua and
// libexec/bagua/bagua-runtime both reach PREFIX/share/bagua/recipes), else
// the source checkout this build came from.
std::string shipped_recipes_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const char* up : {"../share/bagua/recipes", "../../share/bagua/recipes"}) {
      fs::path candidate = (exe.parent_path() / up).lexically_normal();
      if (fs::is_directory(candidate, ec)) return candidate.string();
    }
  }
  std::string source = BAGUA_SOURCE_RECIPES;
  if (!source.empty() && fs::is_directory(source, ec)) return source;
  return "";
}

bool is_recipe_file(const fs::path& p) {
  std::string ext = p.extension().string();
  return ext == ".yaml" || ext == ".yml";
}

std::vector<fs::path> recipes_in(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.is_regular_file(ec) && is_recipe_file(entry.path())) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path, true);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

[[noreturn]] void fail(recipe::Diagnostics& diags) { throw RecipeError(std::move(diags.items)); }

}  // namespace

std::vector<std::string> recipe_catalog_dirs() {
  std::vector<std::string> dirs;
  std::error_code ec;
  auto add = [&](const std::string& d) {
    if (d.empty() || !fs::is_directory(d, ec)) return;
    std::string canonical = fs::weakly_canonical(d, ec).string();
    for (const auto& have : dirs)
      if (fs::weakly_canonical(have, ec).string() == canonical) return;
    dirs.push_back(d);
  };
  if (const char* path = std::getenv("BAGUA_RECIPE_PATH")) {
    std::stringstream s(path);
    for (std::string d; std::getline(s, d, ':');) add(d);
  }
  add(shipped_recipes_dir());
  return dirs;
}

std::vector<CatalogEntry> list_recipe_catalog() {
  std::vector<CatalogEntry> out;
  std::set<std::string> seen;
  for (const auto& dir : recipe_catalog_dirs()) {
    for (const auto& file : recipes_in(dir)) {
      CatalogEntry e;
      e.name = file.stem().string();
      e.path = file.string();
      e.dir = dir;
      e.shadowed = !seen.insert(e.name).second;
      recipe::Diagnostics diags;
      recipe::SourceTree tree = recipe::load_with_extends(e.path, diags);
      if (!diags.empty()) e.problem = diags.items.front().to_string();
      if (tree.doc.is_object()) {
        const json& d = tree.doc;
        if (auto it = d.find("description"); it != d.end() && it->is_string()) e.description = *it;
        e.algorithm = "gradient_allreduce";  // the schema's default
        if (auto a = d.find("algorithm"); a != d.end() && a->is_object() && a->contains("name") &&
                                          (*a)["name"].is_string())
          e.algorithm = (*a)["name"];
        if (auto m = d.find("model"); m != d.end() && m->is_object() && m->contains("torchscript") &&
                                      (*m)["torchscript"].is_string())
          e.model = (*m)["torchscript"];
      }
      out.push_back(std::move(e));
    }
  }
  return out;
}

std::optional<std::string> find_catalog_recipe(const std::string& name) {
  for (const auto& dir : recipe_catalog_dirs())
    for (const char* ext : {".yaml", ".yml"}) {
      fs::path p = fs::path(dir) / (name + ext);
      std::error_code ec;
      if (fs::is_regular_file(p, ec)) return p.string();
    }
  return std::nullopt;
}

bool is_run_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "recipe.resolved.yaml", ec);
}

std::string locate_recipe_argument(const std::string& argument) {
  if (argument.empty())  // an unset shell variable, most often
    throw Error("\"\" (an empty argument) is not a recipe: expected a recipe file, a run directory or the name "
                "of a catalog recipe (bagua recipes list)", true);
  std::error_code ec;
  if (fs::is_directory(argument, ec)) {
    if (is_run_directory(argument)) return (fs::path(argument) / "recipe.resolved.yaml").string();
    throw Error(argument + " is a directory without recipe.resolved.yaml: expected a recipe file, a run directory "
                "(one that bagua run wrote), or the name of a catalog recipe (bagua recipes list)", true);
  }
  if (fs::exists(argument, ec)) return argument;
  // A bare name (no directory part, no extension) may name a catalog recipe.
  if (argument.find('/') == std::string::npos && !is_recipe_file(argument)) {
    if (auto found = find_catalog_recipe(argument)) return *found;
    std::vector<std::string> names;
    for (const auto& e : list_recipe_catalog())
      if (!e.shadowed) names.push_back(e.name);
    std::string hint = recipe::closest_match(argument, names);
    throw Error("no recipe file " + argument + ", and no catalog recipe of that name" +
                    (hint.empty() ? std::string() : " (did you mean " + hint + "?)") +
                    "; the catalog is " + recipe::join(recipe_catalog_dirs(), ", ") +
                    " (BAGUA_RECIPE_PATH adds directories; bagua recipes list shows them)",
                true);
  }
  return argument;  // load_recipe reports the missing file in its own words
}

RecipeArgument resolve_recipe_argument(const std::string& argument) {
  RecipeArgument a;
  a.argument = argument;
  a.file = locate_recipe_argument(argument);
  a.run_directory = is_run_directory(argument);
  if (!a.run_directory) return a;
  // Where the run recorded its output: is it this directory, seen from here?
  recipe::Diagnostics diags;
  recipe::SourceTree tree = recipe::read_yaml_file(a.file, diags);
  const json* output = tree.doc.is_object() ? KeyPath::parse("output.dir").find(tree.doc) : nullptr;
  std::string as_written = fs::path(argument).lexically_normal().string();
  while (as_written.size() > 1 && as_written.back() == '/') as_written.pop_back();
  std::error_code ec;
  const fs::path here = fs::weakly_canonical(as_written, ec);
  if (output && output->is_string() && !output->get<std::string>().empty() &&
      fs::weakly_canonical(output->get<std::string>(), ec) == here)
    return a;
  a.overrides.push_back("output.dir=" + recipe::json_quote(as_written));
  return a;
}

std::vector<std::string> recipe_bases(const std::string& path) {
  recipe::Diagnostics ignored;
  std::vector<RecipeOrigin::File> files;
  std::vector<RecipeOrigin::StalePin> stale;  // a stale pin is no reason to lose a base
  recipe::load_with_extends(path, ignored, &files, &stale);
  std::vector<std::string> out;
  for (size_t i = 1; i < files.size(); ++i)
    if (std::find(out.begin(), out.end(), files[i].path) == out.end()) out.push_back(files[i].path);
  return out;
}

Recipe load_recipe(const RecipeArgument& argument, const std::vector<std::string>& overrides,
                   const RecipeLoadOptions& options) {
  std::vector<std::string> all = argument.overrides;
  all.insert(all.end(), overrides.begin(), overrides.end());
  return load_recipe(argument.file, all, options);
}

// ---- pinning ----------------------------------------------------------------

namespace {

// One edit of the recipe text: replace [column, end) of `line` (1-based
// line, 0-based offsets) with `text`, or insert a whole line after it.
struct Edit {
  int line;
  size_t from, to;
  std::string text;
  bool new_line = false;
};

// The end (0-based, exclusive) of the scalar starting at `from` in `line`.
size_t scalar_end(const std::string& line, size_t from) {
  if (from >= line.size()) return line.size();
  char q = line[from];
  if (q == '"' || q == '\'') {
    for (size_t i = from + 1; i < line.size(); ++i) {
      if (q == '"' && line[i] == '\\') {
        ++i;
        continue;
      }
      if (line[i] == q) {
        if (q == '\'' && i + 1 < line.size() && line[i + 1] == '\'') {
          ++i;
          continue;
        }
        return i + 1;
      }
    }
    return line.size();
  }
  size_t i = from;
  while (i < line.size() && line[i] != ',' && line[i] != ']' && line[i] != '}' &&
         !(line[i] == '#' && i > 0 && line[i - 1] == ' '))
    ++i;
  while (i > from && line[i - 1] == ' ') --i;
  return i;
}

std::string flow_scalar(const std::string& s) {
  // Plain when safe in a flow mapping, else double-quoted.
  bool plain = !s.empty() && s.find_first_of(",[]{}#&*!|>'\"%@`: ") == std::string::npos && s[0] != '-' &&
               s[0] != '?';
  return plain ? s : recipe::json_quote(s);
}

}  // namespace

PinResult pin_recipe_bases(const std::string& path) {
  recipe::Diagnostics diags;
  recipe::SourceTree tree = recipe::read_yaml_file(path, diags);
  if (!diags.empty()) fail(diags);
  PinResult result;
  std::string text = read_text(path);
  if (!tree.doc.is_object() || !tree.doc.contains("extends")) {
    result.text = text;
    return result;
  }
  std::vector<std::string> lines;
  {
    std::stringstream s(text);
    for (std::string l; std::getline(s, l);) lines.push_back(l);
  }
  std::vector<Edit> edits;
  const json& ext = tree.doc["extends"];
  auto base_file = [&](const json& entry, const std::string& at) -> std::string {
    std::string value;
    bool catalog = false;
    if (entry.is_string()) value = entry;
    else if (entry.is_object() && entry.contains("path") && entry["path"].is_string()) value = entry["path"];
    else if (entry.is_object() && entry.contains("recipe") && entry["recipe"].is_string()) {
      value = entry["recipe"];
      catalog = true;
    }
    if (value.empty()) {
      diags.add(tree.locate(at), at, "cannot pin: expected a recipe path or a {path|recipe, sha256} mapping");
      return "";
    }
    if (catalog) {
      auto found = find_catalog_recipe(value);
      if (!found) diags.add(tree.locate(at), at, "no recipe named " + recipe::json_quote(value) + " in the catalog");
      return found.value_or("");
    }
    fs::path p(value);
    if (p.is_relative()) p = fs::path(path).parent_path() / p;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
      diags.add(tree.locate(at), at, "extended recipe not found: " + p.lexically_normal().string());
      return "";
    }
    return p.lexically_normal().string();
  };
  auto pin_entry = [&](const json& entry, const std::string& at, bool wrap_in_list) {
    std::string file = base_file(entry, at);
    if (file.empty()) return;
    std::string sha = sha256_file(file);
    const bool was_pinned = entry.is_object() && entry.contains("sha256") && entry["sha256"].is_string();
    result.bases.push_back({file, sha, was_pinned ? entry["sha256"].get<std::string>() : std::string()});
    recipe::SourcePos pos = tree.locate(at);
    if (pos.line <= 0 || pos.line > static_cast<int>(lines.size())) return;
    const std::string& line = lines[pos.line - 1];
    size_t from = static_cast<size_t>(pos.column - 1);
    if (entry.is_string()) {
      std::string repl = "{path: " + flow_scalar(entry.get<std::string>()) + ", sha256: " + sha + "}";
      if (wrap_in_list) repl = "[" + repl + "]";
      edits.push_back({pos.line, from, scalar_end(line, from), repl});
      return;
    }
    if (entry.contains("sha256")) {  // re-pin: replace the digest
      recipe::SourcePos sp = tree.locate(at + ".sha256");
      const std::string& sl = lines[sp.line - 1];
      size_t sf = static_cast<size_t>(sp.column - 1);
      edits.push_back({sp.line, sf, scalar_end(sl, sf), sha});
      return;
    }
    const std::string key = entry.contains("path") ? "path" : "recipe";
    recipe::SourcePos vp = tree.locate(at + "." + key);
    const std::string& vl = lines[vp.line - 1];
    size_t vf = static_cast<size_t>(vp.column - 1);
    if (from < line.size() && line[from] == '{') {  // flow mapping: add after the value
      size_t end = scalar_end(vl, vf);
      edits.push_back({vp.line, end, end, ", sha256: " + sha});
    } else {  // block mapping: a line under the key, at its indentation
      recipe::SourcePos kp = tree.locate_key(at + "." + key);
      edits.push_back({vp.line, 0, 0, std::string(static_cast<size_t>(kp.column - 1), ' ') + "sha256: " + sha, true});
    }
  };
  if (ext.is_string()) {
    pin_entry(ext, "extends", true);
  } else if (ext.is_array()) {
    for (size_t i = 0; i < ext.size(); ++i) pin_entry(ext[i], recipe::index_path("extends", i), false);
  } else {
    diags.add(tree.locate("extends"), "extends", "cannot pin: expected a recipe path or a list");
  }
  if (!diags.empty()) fail(diags);
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) {
    return std::tie(a.line, a.from) > std::tie(b.line, b.from);
  });
  for (const Edit& e : edits) {
    if (e.new_line) {
      lines.insert(lines.begin() + e.line, e.text);
    } else {
      std::string& l = lines[e.line - 1];
      l = l.substr(0, e.from) + e.text + l.substr(std::min(e.to, l.size()));
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) result.text += lines[i] + ((i + 1 < lines.size() || (!text.empty() && text.back() == '\n')) ? "\n" : "");
  return result;
}

// ---- standalone copies --------------------------------------------------------

std::string standalone_recipe_text(const std::string& path, const std::string& dest) {
  recipe::Diagnostics diags;
  std::vector<RecipeOrigin::File> files;
  recipe::SourceTree tree = recipe::load_with_extends(path, diags, &files);
  if (!diags.empty() || !tree.doc.is_object()) fail(diags);
  // The schema says which values are files; check a copy only to learn it.
  recipe::SourceTree probe = tree;
  recipe::Diagnostics ignored;
  recipe::SchemaFindings findings = recipe::check_against_schema(probe, recipe::recipe_schema(), ignored);
  std::error_code ec;
  fs::path dest_dir = fs::absolute(fs::path(dest), ec).parent_path();
  auto rebase = [&](const std::string& key) {
    json* node = KeyPath::parse(key).find(tree.doc);
    if (!node || !node->is_string()) return;
    std::string value = *node;
    if (value.find('$') != std::string::npos || fs::path(value).is_absolute()) return;
    fs::path from = fs::path(tree.locate(key).file).parent_path() / value;
    fs::path absolute = fs::absolute(from, ec).lexically_normal();
    fs::path rebased = absolute.lexically_relative(dest_dir);
    // Only the root in common (/usr/share/... from /home/...): "../../.."
    // up to / says less than the absolute path, and breaks when the copy moves.
    auto top = [](const fs::path& p) { return std::next(p.begin()) == p.end() ? fs::path() : *std::next(p.begin()); };
    const bool root_only = top(absolute) != top(dest_dir);
    *node = rebased.empty() || root_only ? absolute.string() : rebased.string();
  };
  for (const auto& key : findings.file_paths) rebase(key);
  for (const auto& key : findings.dir_paths) rebase(key);
  for (const auto& key : findings.glob_paths) rebase(key);
  // checkpoint.resume is a path too, relative to the recipe, unless a word.
  if (const json* resume = KeyPath::parse("checkpoint.resume").find(tree.doc);
      resume && resume->is_string() && *resume != "auto" && *resume != "never") {
    rebase("checkpoint.resume");
  }
  tree.doc.erase("name");  // the copy is named after its own file
  // ... and writes its runs where its name says, never into the directory of
  // the recipe it was copied from (a run there would resume that one's).
  const std::string name = fs::path(dest).stem().string();
  if (!tree.doc.contains("output") || !tree.doc["output"].is_object()) tree.doc["output"] = json::object();
  tree.doc["output"]["dir"] = "runs/" + name;
  std::string header = "# Standalone copy of " + path + " (file sha256 " + (files.empty() ? "?" : files[0].sha256) +
                       ") made by `bagua recipes copy`:\n# its extends are merged in and relative paths rebased.\n";
  return header + recipe::to_yaml(tree.doc);
}

// ---- comparing ----------------------------------------------------------------

namespace {
void diff_into(const json& a, const json& b, const std::string& path, std::vector<KeyDifference>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const auto& k : keys) {
      std::string child = recipe::child_path(path, k);
      bool in_a = a.contains(k), in_b = b.contains(k);
      if (in_a && in_b) diff_into(a[k], b[k], child, out);
      else out.push_back({child, in_a ? std::optional<json>(a[k]) : std::nullopt,
                          in_b ? std::optional<json>(b[k]) : std::nullopt});
    }
    return;
  }
  if (a.is_array() && b.is_array()) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      std::string child = recipe::index_path(path, i);
      if (i < a.size() && i < b.size()) diff_into(a[i], b[i], child, out);
      else out.push_back({child, i < a.size() ? std::optional<json>(a[i]) : std::nullopt,
                          i < b.size() ? std::optional<json>(b[i]) : std::nullopt});
    }
    return;
  }
  if (a != b) out.push_back({path, a, b});
}
}  // namespace

std::vector<KeyDifference> diff_resolved(const json& a, const json& b) {
  std::vector<KeyDifference> out;
  diff_into(a, b, "", out);
  return out;
}

}  // namespace bagua
