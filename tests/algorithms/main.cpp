// test_algorithms runs in two roles: as the GoogleTest runner (no
// BAGUA_TEST_SCENARIO in the environment), and as one worker of a
// multi-process scenario that the runner launched through LocalSupervisor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

int run_scenario(const std::string& name);  // scenarios.cpp

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv("BAGUA_TEST_SCENARIO")) return run_scenario(scenario);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
