// bagua: data-parallel PyTorch training from one YAML recipe.
#include "command.h"

#include <bagua/errors.h>
#include <bagua/version.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>

namespace bagua::cli {
std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}
}  // namespace bagua::cli

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// Ends the process once a command has returned, its output flushed,
// without running static destructors. Everything a command owns (files,
// child processes, sockets, temporary directories, the process group) is
// released in its own scope before it returns; what is left at exit is
// LibTorch's teardown of its libraries (Debian's loads some 290: operator
// deregistration and the like), about 0.1 s of CPU per process, and with
// it some 0.4 s of a two-worker `bagua run`'s wall time, paid by the
// launcher and by every worker. The sanitizer builds exit normally:
// LeakSanitizer and ThreadSanitizer report, and set the exit status, at
// exit.
int leave(int code) {
  if (kSanitized) return code;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

int run_command(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) { return leave(run_command(argc, argv)); }

namespace {

int run_command(int argc, char** argv) {
  using namespace bagua;
  using namespace bagua::cli;
  CLI::App app{"bagua: data-parallel PyTorch training from one YAML recipe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("bagua ") + bagua::version());
  auto& commands = command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const CommandInfo& a, const CommandInfo& b) { return a.name < b.name; });
  std::map<CLI::App*, CommandRunner> runners;
  for (const auto& info : commands) {
    CLI::App* sub = app.add_subcommand(info.name, info.description);
    runners[sub] = info.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitInvalidInput;
    // Anything else in the form of every other error, with where to look.
    std::string name = "bagua";
    for (const CLI::App* sub : app.get_subcommands()) name += " " + sub->get_name();
    std::string what = e.what();
    if (!what.empty() && what.back() == ' ') what += "\"\" (an empty argument)";
    std::cerr << name << ": error: " << what << "\n"
              << name << ": (`" << name << " --help` lists what it takes"
              << (name == "bagua" ? "" : "; a recipe key is changed with --set KEY=VALUE") << ")\n";
    return kExitInvalidInput;
  }
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const bagua::DivergedError& e) {
      std::cerr << "bagua " << sub->get_name() << ": error: " << e.what() << "\n";
      return kExitDiverged;
    } catch (const bagua::CommError& e) {
      // A peer missing or gone, a rendezvous timeout: a worker run by
      // torchrun or Slurm exits as docs/run.md's failure table says (3), as
      // bagua's own agent does for it.
      const std::string what = e.what();
      std::cerr << "bagua " << sub->get_name() << ": error: " << what << "\n";
      // Gloo's words for a peer that went away: this rank is rarely the
      // cause, and its line may be the first a user reads.
      for (const char* gone : {"closed by peer", "reset by peer", "Broken pipe"}) {
        if (what.find(gone) != std::string::npos) {
          std::cerr << "bagua " << sub->get_name()
                    << ": (a peer closed its connection: another rank most likely failed first, and its own "
                       "error says why)\n";
          break;
        }
      }
      return e.is_user_error() ? kExitInvalidInput : kExitWorkerFailed;
    } catch (const bagua::Error& e) {
      std::cerr << "bagua " << sub->get_name() << ": error: " << e.what() << "\n";
      return e.is_user_error() ? kExitInvalidInput : kExitInternal;
    } catch (const std::exception& e) {
      std::cerr << "bagua " << sub->get_name() << ": internal error: " << e.what() << "\n";
      return kExitInternal;
    }
  }
  return kExitInternal;
}

}  // namespace
