// Runs one fuzz case with a deadline: the case's verdict, or a test failure
// that ends the test program when the case hangs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace bagua::testing {

// Runs `body` on a thread of its own and returns what it returns (an
// exception it throws becomes "another exception: ..."). When it has not
// finished within `limit`, records a failure naming `what` and ends the
// program: the thread still runs, and returning would let exit() destroy
// the statics it uses (the loaders' regexes) under it, a use-after-free.
inline std::string run_bounded(const std::function<std::string()>& body, std::chrono::seconds limit,
                               const std::string& what) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> outcome = promise->get_future();
  std::thread([promise, body] {
    try {
      promise->set_value(body());
    } catch (const std::exception& e) {
      promise->set_value(std::string("another exception: ") + e.what());
    }
  }).detach();
  if (outcome.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not finish within " << limit.count() << " s";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  return outcome.get();
}

}  // namespace bagua::testing
