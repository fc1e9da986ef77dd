// In the `bagua` executable only: run, launch, plan and bench are handed to
// `bagua-runtime` (the commands that load LibTorch), with the same
// arguments, by exec: same process, same pid, so signals, exit codes and
// the terminal are the runtime's. bagua-runtime is looked up beside this
// executable (the build tree), then in ../libexec/bagua/ (an install);
// BAGUA_RUNTIME overrides both.
#include "command.h"
#include "runtime_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <list>
#include <string>
#include <vector>

namespace bagua::cli {
namespace {

namespace fs = std::filesystem;

std::string runtime_path() {
  if (const char* env = std::getenv("BAGUA_RUNTIME"); env && *env) return env;
  const fs::path here = fs::path(self_exe()).parent_path();
  for (const fs::path& candidate : {here / "bagua-runtime", here / ".." / "libexec" / "bagua" / "bagua-runtime"}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.lexically_normal().string();
  }
  return "";
}

// LibTorch's own log lines (c10d's "failed to bind" warnings behind a
// port in use, glog's "Logging before InitGoogleLogging()") repeat what
// bagua's one-line errors say; they are silenced unless BAGUA_DEBUG is set
// or the user set the level. Read when LibTorch loads, so set before the
// exec: Debian's LibTorch logs through glog, the wheels' through c10.
void quiet_libtorch_logs() {
  const char* debug = std::getenv("BAGUA_DEBUG");
  if (debug && *debug && std::string(debug) != "0") return;
  ::setenv("GLOG_minloglevel", "3", /*overwrite=*/0);
  ::setenv("TORCH_CPP_LOG_LEVEL", "FATAL", /*overwrite=*/0);
}

CommandRunner forward(CLI::App& sub, const std::string& name) {
  sub.prefix_command();     // every argument is the runtime's, even --help
  sub.set_help_flag();
  sub.allow_extras();
  return [&sub, name]() -> int {
    const std::string runtime = runtime_path();
    if (runtime.empty()) {
      std::cerr << "bagua " << name << ": cannot find bagua-runtime (the executable of the commands that train) "
                << "beside " << self_exe() << " or in ../libexec/bagua/; reinstall bagua, or set BAGUA_RUNTIME "
                << "to its path\n";
      return kExitInvalidInput;  // an environment to mend, not a bug
    }
    std::vector<std::string> args{"bagua", name};
    for (const auto& a : sub.remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    quiet_libtorch_logs();
    ::execv(runtime.c_str(), argv.data());
    std::cerr << "bagua " << name << ": cannot run " << runtime << ": " << std::strerror(errno) << "\n";
    return kExitInvalidInput;
  };
}

// One registration per runtime command.
struct Forwarders {
  Forwarders() {
    for (const auto& c : kRuntimeCommands) {
      const std::string name = c.name;
      registrations.emplace_back(name, c.description, [name](CLI::App& sub) { return forward(sub, name); });
    }
  }
  std::list<CommandRegistration> registrations;
};
const Forwarders kForwarders;

}  // namespace
}  // namespace bagua::cli
