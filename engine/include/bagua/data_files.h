// The files behind the streamed data formats, found without reading them:
// token shards named by paths and patterns, and the images of a folder in
// torchvision's ImageFolder layout. Plain file-system work (no LibTorch), so
// `bagua validate`, provenance and the data pipeline list them alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bagua {

// Whether `path` holds a wildcard (*, ? or [) of a file pattern.
bool has_wildcard(const std::string& path);

// The files `patterns` name, in order: a plain path as it is (whether or not
// it exists), a pattern's matching regular files in sorted (byte) order.
// Patterns that match nothing go to `unmatched` when given.
std::vector<std::string> expand_file_patterns(const std::vector<std::string>& patterns,
                                              std::vector<std::string>* unmatched = nullptr);

// Whether a file name ends in .jpg, .jpeg or .png, in any letter case.
bool is_image_file_name(const std::string& name);

// An ImageFolder root: each directory under it is a class (hidden ones,
// starting with '.', are not), in sorted order, its index its position;
// each class's images are the image files anywhere under its directory,
// directory by directory in sorted order, sorted by name within one (as
// torchvision walks them).
struct ImageFolderListing {
  std::vector<std::string> classes;        // names, sorted
  std::vector<std::string> files;          // absolute paths, class by class
  std::vector<int64_t> labels;             // class index of each file
  std::vector<int64_t> sizes;              // bytes of each file (when asked for)
  std::vector<std::string> empty_classes;  // classes without an image file
  int64_t other_files = 0;                 // files that are not .jpg/.jpeg/.png (ignored)
};

// Lists `root` (sizes too with `with_sizes`: one stat per file). Throws a
// user bagua::Error naming the path when `root` is not a readable directory.
ImageFolderListing list_image_folder(const std::string& root, bool with_sizes);

}  // namespace bagua
