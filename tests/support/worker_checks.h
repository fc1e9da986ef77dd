// A tiny assertion harness for code that runs inside worker processes,
// where GoogleTest's per-test bookkeeping does not apply: every check prints
// on failure with the rank, and the worker's exit code says whether any
// failed. The parent test asserts the exit codes and the counts printed.
#pragma once

#include <bagua/communication.h>

#include <ATen/ATen.h>

#include <iostream>
#include <sstream>
#include <string>

namespace bagua::testing {

class WorkerChecks {
 public:
  explicit WorkerChecks(int rank) : rank_(rank) {}

  void expect(bool ok, const std::string& what) {
    if (ok) {
      ++passed_;
    } else {
      ++failed_;
      std::cerr << "CHECK FAILED on rank " << rank_ << ": " << what << std::endl;
    }
  }

  // Exact equality of dtype, shape and every element (compared on the host,
  // so a CUDA result can be checked against a CPU reference).
  void expect_equal(const at::Tensor& got_any, const at::Tensor& want_any, const std::string& what) {
    at::Tensor got = got_any.cpu(), want = want_any.cpu();
    bool ok = got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
              at::equal(got, want);
    if (!ok) {
      std::ostringstream msg;
      msg << what << "\n  got:  " << got << "\n  want: " << want;
      expect(false, msg.str());
    } else {
      expect(true, what);
    }
  }

  // Same dtype and shape, every element within `rtol` (relative) of the
  // reference: for results whose last bit depends on the device (CUDA
  // divides by multiplying with the reciprocal).
  void expect_close(const at::Tensor& got_any, const at::Tensor& want_any, double rtol, const std::string& what) {
    at::Tensor got = got_any.cpu(), want = want_any.cpu();
    bool ok = got.scalar_type() == want.scalar_type() && got.sizes() == want.sizes() &&
              at::allclose(got, want, rtol, /*atol=*/0.0);
    if (!ok) {
      std::ostringstream msg;
      msg << what << " (rtol " << rtol << ")\n  got:  " << got << "\n  want: " << want;
      expect(false, msg.str());
    } else {
      expect(true, what);
    }
  }

  // Runs `body`, expecting it to throw E whose message contains `fragment`.
  template <typename E, typename F>
  void expect_throws(F&& body, const std::string& fragment, const std::string& what) {
    try {
      body();
      expect(false, what + ": expected an exception, none was thrown");
    } catch (const E& e) {
      std::string message = e.what();
      expect(message.find(fragment) != std::string::npos,
             what + ": message lacks '" + fragment + "': " + message);
    } catch (const std::exception& e) {
      expect(false, what + ": wrong exception type: " + e.what());
    }
  }

  // Prints "rank R: N checks passed, M failed" and returns the exit code.
  int finish() const {
    std::cout << "rank " << rank_ << ": " << passed_ << " checks passed, " << failed_ << " failed"
              << std::endl;
    return failed_ == 0 ? 0 : 1;
  }

 private:
  int rank_;
  int passed_ = 0;
  int failed_ = 0;
};

}  // namespace bagua::testing

#include <functional>
#include <map>

namespace bagua::testing {

// Runs the scenario called `name`; unknown names and uncaught exceptions
// are reported and fail the worker.
inline int dispatch_scenario(const std::string& name,
                             const std::map<std::string, std::function<int()>>& scenarios) {
  auto it = scenarios.find(name);
  if (it == scenarios.end()) {
    std::cerr << "unknown scenario " << name << "\n";
    return 2;
  }
  try {
    return it->second();
  } catch (const std::exception& e) {
    std::cerr << "scenario " << name << " failed: " << e.what() << std::endl;
    return 1;
  }
}

// True when every rank of the default group holds exactly the same `t`.
inline bool identical_across_ranks(const at::Tensor& t) {
  int world = bagua::get_world_size();
  at::Tensor all = at::zeros({world, t.numel()}, t.options());
  bagua::allgather(t.contiguous(), all);
  for (int r = 1; r < world; ++r) {
    if (!at::equal(all[r], all[0])) return false;
  }
  return true;
}

}  // namespace bagua::testing
