// Shard patterns and ImageFolder listings (bagua/data_files.h).
#include <bagua/data_files.h>
#include <bagua/errors.h>

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

namespace bagua {
namespace fs = std::filesystem;

bool has_wildcard(const std::string& path) { return path.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns,
                                              std::vector<std::string>* unmatched) {
  std::vector<std::string> files;
  for (const auto& pattern : patterns) {
    if (!has_wildcard(pattern)) {
      files.push_back(pattern);
      continue;
    }
    glob_t g{};
    std::vector<std::string> found;
    if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        struct stat st {};
        if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) found.emplace_back(g.gl_pathv[i]);
      }
    }
    ::globfree(&g);
    std::sort(found.begin(), found.end());
    if (found.empty() && unmatched) unmatched->push_back(pattern);
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

bool is_image_file_name(const std::string& name) {
  auto dot = name.find_last_of('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

ImageFolderListing list_image_folder(const std::string& root, bool with_sizes) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw Error(root + ": " + (fs::exists(root, ec) ? "not a directory" : "no such directory") +
                    " (expected an image folder: ROOT/CLASS/IMAGE.jpg or .png)",
                true);
  ImageFolderListing out;
  fs::directory_iterator it(root, ec);
  if (ec) throw Error(root + ": cannot list: " + ec.message(), true);
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name[0] != '.' && entry.is_directory(ec)) out.classes.push_back(name);
  }
  std::sort(out.classes.begin(), out.classes.end());
  for (size_t c = 0; c < out.classes.size(); ++c) {
    const fs::path dir = fs::path(root) / out.classes[c];
    // (directory, name) so that the files of one directory sort together,
    // directories in order, as torchvision's sorted(os.walk(...)) has them.
    std::vector<std::pair<std::string, std::string>> found;
    fs::recursive_directory_iterator walk(dir, fs::directory_options::follow_directory_symlink, ec);
    if (ec) throw Error(dir.string() + ": cannot list: " + ec.message(), true);
    for (auto i = fs::begin(walk); i != fs::end(walk); i.increment(ec)) {
      if (ec) throw Error(dir.string() + ": cannot list: " + ec.message(), true);
      if (!i->is_regular_file(ec)) continue;
      const std::string name = i->path().filename().string();
      if (!is_image_file_name(name)) {
        ++out.other_files;
        continue;
      }
      found.emplace_back(i->path().parent_path().string(), name);
    }
    if (found.empty()) out.empty_classes.push_back(out.classes[c]);
    std::sort(found.begin(), found.end());
    for (const auto& [parent, name] : found) {
      const std::string path = (fs::path(parent) / name).string();
      out.files.push_back(path);
      out.labels.push_back(static_cast<int64_t>(c));
      if (with_sizes) {
        struct stat st {};
        out.sizes.push_back(::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0);
      }
    }
  }
  return out;
}

}  // namespace bagua
