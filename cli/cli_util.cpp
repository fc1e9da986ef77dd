// Helpers shared by the subcommands (declared in command.h).
#include "command.h"

#include <unistd.h>

#include <iostream>

namespace bagua::cli {

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string("bagua");
}

int report_invalid_recipe(const RecipeError& e, const std::string& path) {
  for (const auto& d : e.diagnostics()) std::cerr << d.to_string() << "\n";
  const size_t n = e.diagnostics().size();
  std::cerr << path << ": invalid recipe, " << n << " error" << (n == 1 ? "" : "s") << "\n";
  return kExitInvalidInput;
}

}  // namespace bagua::cli
