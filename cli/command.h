// How a subcommand joins the `bagua` command line.
//
// Each cli/<name>_command.cpp defines one static CommandRegistration. Its
// setup function adds its flags to the subcommand and returns the function
// that runs it; main() runs the selected one and exits with its result.
// Exit codes are shared by every command (docs/cli.md, bagua/exit_codes.h).
#pragma once

#include <bagua/exit_codes.h>
#include <bagua/recipe.h>

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace bagua::cli {

using CommandRunner = std::function<int()>;
using CommandSetup = std::function<CommandRunner(CLI::App& sub)>;

struct CommandInfo {
  std::string name;
  std::string description;
  CommandSetup setup;
};

// All registered commands, in registration order.
std::vector<CommandInfo>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// This executable's path (workers are started as copies of it).
std::string self_exe();

// Prints every diagnostic of an invalid recipe, then "PATH: invalid recipe,
// N errors", to stderr; returns kExitInvalidInput.
int report_invalid_recipe(const RecipeError& e, const std::string& path);

}  // namespace bagua::cli
