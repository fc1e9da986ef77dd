// Truncated and bit-flipped data files through load_dataset() (the check
// `bagua run` makes before any worker starts): CSV, JSONL and IDX (plain
// and gzipped). Every case must load or throw a DataError that names the
// file; never a crash, another exception, or a hang (each case bounded).
// Deterministic (fixed seed); BAGUA_FUZZ_CASES raises the count locally.
#include "data/data_test_support.h"
#include "support/bounded.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

namespace bagua {
namespace {

std::string slurp_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A small IDX pair: 12 images of 4x5 bytes, and their labels.
std::string idx_images() {
  std::string b = {0, 0, 8, 3, 0, 0, 0, 12, 0, 0, 0, 4, 0, 0, 0, 5};
  for (int i = 0; i < 12 * 20; ++i) b.push_back(static_cast<char>((i * 37) % 256));
  return b;
}
std::string idx_labels() {
  std::string b = {0, 0, 8, 1, 0, 0, 0, 12};
  for (int i = 0; i < 12; ++i) b.push_back(static_cast<char>(i % 10));
  return b;
}

std::string corrupt(const std::string& bytes, std::mt19937_64& rng, std::string& kind) {
  std::string out = bytes;
  switch (rng() % 4) {
    case 0:
      kind = "truncate";
      return out.substr(0, out.empty() ? 0 : rng() % out.size());
    case 1:
      kind = "bit flips";
      for (int k = 0; k < 1 + static_cast<int>(rng() % 8) && !out.empty(); ++k) {
        out[rng() % out.size()] ^= static_cast<char>(1 << (rng() % 8));
      }
      return out;
    case 2:
      kind = "garbage inserted";
      for (int k = 0; k < 1 + static_cast<int>(rng() % 16); ++k) {
        out.insert(out.empty() ? 0 : rng() % out.size(), 1, static_cast<char>(rng() % 256));
      }
      return out;
    default:
      kind = "bytes overwritten";
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4) && !out.empty(); ++k) {
        out[rng() % out.size()] = static_cast<char>(rng() % 256);
      }
      return out;
  }
}

struct Subject {
  std::string name;
  std::function<DataSource(const std::string& dir)> source;  // where the corrupted files are
  std::vector<std::pair<std::string, std::string>> files;     // file name -> good bytes
  TargetKind target;
};

TEST(DataFuzz, CorruptedFilesLoadOrFailNamingTheFile) {
  int cases = 600;
  if (const char* n = std::getenv("BAGUA_FUZZ_CASES")) cases = std::atoi(n) / 3;
  const std::string good = testing::data_dir() + "/good/";
  auto gz = [](const std::string& bytes) {
    // gzip through the system's gzip, as the real data sets come.
    const auto tmp = std::filesystem::temp_directory_path() / ("bagua-gz-" + std::to_string(getpid()));
    testing::write_file(tmp.string(), bytes);
    EXPECT_EQ(std::system(("gzip -nf " + tmp.string()).c_str()), 0);
    std::string out = slurp_bytes(tmp.string() + ".gz");
    std::filesystem::remove(tmp.string() + ".gz");
    return out;
  };
  std::vector<Subject> subjects;
  subjects.push_back({"csv",
                      [](const std::string& dir) {
                        DataSource s;
                        s.format = DataFormat::kCsv;
                        s.path = dir + "/points.csv";
                        s.target_column.name = "label";
                        return s;
                      },
                      {{"points.csv", slurp_bytes(good + "points.csv")}},
                      TargetKind::kClassIndex});
  for (const char* jsonl : {"tokens.jsonl", "vectors.jsonl"}) {
    const std::string name = jsonl;
    subjects.push_back({name,
                        [name](const std::string& dir) {
                          DataSource s;
                          s.format = DataFormat::kJsonl;
                          s.path = dir + "/" + name;
                          return s;
                        },
                        {{name, slurp_bytes(good + name)}},
                        TargetKind::kClassIndex});
  }
  for (bool zipped : {false, true}) {
    const std::string ext = zipped ? ".gz" : "";
    subjects.push_back({std::string("idx") + ext,
                        [ext](const std::string& dir) {
                          DataSource s;
                          s.format = DataFormat::kIdx;
                          s.images = dir + "/images.idx" + ext;
                          s.labels = dir + "/labels.idx" + ext;
                          return s;
                        },
                        {{"images.idx" + ext, zipped ? gz(idx_images()) : idx_images()},
                         {"labels.idx" + ext, zipped ? gz(idx_labels()) : idx_labels()}},
                        TargetKind::kClassIndex});
  }
  const auto dir = std::filesystem::temp_directory_path() / ("bagua-data-fuzz-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::mt19937_64 rng(20261123);
  int loaded = 0, refused = 0;
  for (int c = 0; c < cases; ++c) {
    const Subject& subject = subjects[static_cast<size_t>(c) % subjects.size()];
    const size_t victim = rng() % subject.files.size();
    std::string kind;
    for (size_t f = 0; f < subject.files.size(); ++f) {
      const auto& [name, bytes] = subject.files[f];
      testing::write_file((dir / name).string(), f == victim ? corrupt(bytes, rng, kind) : bytes);
    }
    const std::string what = "case " + std::to_string(c) + " (" + kind + " of " + subject.name + ")";
    DataSource source = subject.source(dir.string());
    const std::string result = testing::run_bounded(
        [source, target = subject.target]() -> std::string {
          try {
            auto data = load_dataset(source, target);
            return data->size() > 0 ? "loaded" : "an empty data set without an error";
          } catch (const DataError& e) {
            // The message starts with the file (the corrupted one or its pair).
            const std::string m = e.what();
            return m.find(".csv") != std::string::npos || m.find(".jsonl") != std::string::npos ||
                           m.find(".idx") != std::string::npos
                       ? "refused"
                       : "a DataError naming no file: " + m;
          }
        },
        std::chrono::seconds(10), what);
    if (result == "loaded") {
      ++loaded;
    } else if (result == "refused") {
      ++refused;
    } else {
      ADD_FAILURE() << what << ": " << result;
    }
  }
  std::filesystem::remove_all(dir);
  EXPECT_GT(refused, cases / 4) << loaded << " loaded, " << refused << " refused";
}

}  // namespace
}  // namespace bagua
