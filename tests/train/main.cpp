// test_train runs in two roles: as the GoogleTest runner (no
// BAGUA_TEST_SCENARIO in the environment), and as one worker of a
// multi-process scenario of the trainer's parts (seams_scenarios.cpp) that
// the runner launched through LocalSupervisor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

int run_scenario(const std::string& name);  // seams_scenarios.cpp

int main(int argc, char** argv) {
  if (const char* scenario = std::getenv("BAGUA_TEST_SCENARIO")) return run_scenario(scenario);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
