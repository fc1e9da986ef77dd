// The files of a checkpoint directory, below the protocol of checkpoint.h:
// each written and made durable with every step checked (a full disk shows
// at write, fsync or close), its size and CRC-32 summed as the bytes go out,
// so nothing is read back to list it in meta.json; read back and summed when
// a resume verifies them; complete checkpoints listed by step.
#pragma once

#include <bagua/checkpoint_meta.h>

#include <torch/serialize.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace bagua::train {

// "step-NNNNNNNN", a checkpoint's directory name.
std::string step_name(int64_t step);

// Size and CRC-32 (zlib's, as Python's zlib.crc32) of a file.
struct FileSum {
  uint64_t bytes = 0;
  uint32_t crc = 0;
};

// Writes `text` to `path`, checked and synced; throws a bagua::Error naming
// the file on any failure.
FileSum write_text(const std::filesystem::path& path, const std::string& text);

// LibTorch's own file writer aborts the process on a full disk (its
// destructor throws while unwinding), so archives go through this instead.
FileSum save_archive(torch::serialize::OutputArchive& archive, const std::filesystem::path& path);

// fsync() of a file or directory, best effort.
void fsync_path(const std::filesystem::path& path);

// Renames the complete directory `tmp` to `final_dir`. A `final_dir` already
// there is first renamed to `aside` and removed once `tmp` took its name, so
// at every moment one complete copy exists under one of the three names (a
// recovery after a crash picks it up). Syncs the parent directory.
void replace_directory(const std::filesystem::path& tmp, const std::filesystem::path& final_dir,
                       const std::filesystem::path& aside);

// A file's size and CRC-32, read back (a resume verifying a checkpoint).
FileSum file_sum(const std::filesystem::path& path);

std::string hex32(uint32_t v);

// meta.json's entry for a file written with `sum`.
CheckpointFile checkpoint_file(const std::string& name, const FileSum& sum);

// Checkpoint directories under `dir` (step-N with a meta.json), oldest first.
std::vector<std::pair<int64_t, std::filesystem::path>> complete_checkpoints(const std::string& dir);

}  // namespace bagua::train
