#include "launch/test_hold.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

namespace bagua::launch {

void hold_for_test(const char* point) {
  const char* spec = std::getenv("BAGUA_TEST_HOLD");
  if (spec == nullptr) return;
  const std::string s(spec);
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || s.compare(0, colon, point) != 0) return;
  const double seconds = std::atof(s.c_str() + colon + 1);
  std::cerr << "bagua run: test hold at " << point << " for " << seconds << " s" << std::endl;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // sleep_for resumes after a signal
}

}  // namespace bagua::launch
