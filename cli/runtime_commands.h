// The commands that train or measure, and so load LibTorch: they live in
// the `bagua-runtime` executable. The `bagua` command (no LibTorch:
// validate, schema, report, recipes, diff start in milliseconds) lists them too and hands
// them over to bagua-runtime with the same arguments (runtime_forward.cpp).
#pragma once

#include <array>

namespace bagua::cli {

struct RuntimeCommand {
  const char* name;
  const char* description;
};

inline constexpr std::array<RuntimeCommand, 5> kRuntimeCommands = {{
    {"run", "Train from a recipe: launch the workers, or be one"},
    {"launch", "Run a command as the workers of this node (like torchrun)"},
    {"plan", "Predict a run: buckets, bytes sent per step for every algorithm, memory, steps"},
    {"bench", "Measure each algorithm's speed on this model and this network"},
    {"store", "Serve an elastic job's rendezvous store from a machine that may run no workers"},
}};

// The description of runtime command `name` (one of the above).
constexpr const char* runtime_description(const char* name) {
  for (const auto& c : kRuntimeCommands) {
    const char* a = c.name;
    const char* b = name;
    while (*a && *a == *b) ++a, ++b;
    if (*a == *b) return c.description;
  }
  return "";
}

}  // namespace bagua::cli
