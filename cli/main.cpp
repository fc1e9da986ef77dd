// bagua: data-parallel PyTorch training from one YAML recipe.
#include "command.h"

#include <bagua/errors.h>
#include <bagua/version.h>

#include <algorithm>
#include <iostream>
#include <map>

namespace bagua::cli {
std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}
}  // namespace bagua::cli

int main(int argc, char** argv) {
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
