// The Python interpreter the tests run their PyTorch references with:
// Debian's python3-torch is importable only from /usr/bin/python3 (the
// python3 first on PATH may be another); a machine whose PyTorch lives
// elsewhere (a GPU machine's wheel) names its interpreter in
// BAGUA_TEST_PYTHON (scripts/gpu-check.sh does).
#pragma once

#include <cstdlib>
#include <string>

namespace bagua::testing {

inline std::string test_python() {
  const char* given = std::getenv("BAGUA_TEST_PYTHON");
  return given != nullptr && *given != '\0' ? std::string(given) : std::string("/usr/bin/python3");
}

}  // namespace bagua::testing
