// What a model file is, read from its bytes without LibTorch, so that
// `bagua validate` can refuse a file that is not TorchScript and `bagua
// run` can say what it is instead of LibTorch's stack trace.
//
// Contract: torchscript_file_problem() returns "" when `path` looks like a
// TorchScript archive (a zip whose entries include code/ or constants.pkl,
// as torch.jit's save writes them; LibTorch has the last word), else why it
// is not one, as a clause: "it was written by torch.save() (...)", "it is
// not a zip archive, as TorchScript files are", ... It reads only the
// first bytes and the zip's central directory, and never throws (a file
// that cannot be read is a reason too).
#pragma once

#include <string>

namespace bagua {

std::string torchscript_file_problem(const std::string& path);

// How to make a TorchScript file, for the messages that refuse one.
inline constexpr const char* kTorchScriptExportHint =
    "export the model with torch.jit.script(model).save(\"model.pt\") (or torch.jit.trace)";

}  // namespace bagua
