// Typed errors thrown by libbagua.
//
// Library code never aborts and never falls back silently: it throws one of
// these, carrying the context a user needs (variable, rank, collective, ...).
// The CLI turns them into one message and an exit code: user errors (bad
// input, bad environment) exit 2, a diverged training 4, everything else 1.
#pragma once

#include <stdexcept>
#include <string>

namespace bagua {

// Base of every bagua error.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, bool user_error = false)
      : std::runtime_error(message), user_error_(user_error) {}
  // True when the cause is the user's input or environment, not a bug.
  bool is_user_error() const { return user_error_; }

 private:
  bool user_error_;
};

// A missing or malformed setting: an environment variable, a flag, an option.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message) : Error(message, true) {}
};

// init_process_group() was called a second time in the same process.
class RepeatedInitializationError : public Error {
 public:
  RepeatedInitializationError()
      : Error("init_process_group() was already called in this process", true) {}
};

// A collective or rendezvous failed: a peer missing or gone, a timeout, or
// ranks that disagree about a collective's arguments (shape, dtype, root).
class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message, false) {}
};

// Arguments to a collective that are wrong on this rank alone (an op the
// dtype does not support, a tensor on the wrong device, ...).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& message) : Error(message, true) {}
};

// Training diverged: a loss or gradient became NaN or infinite (the recipe's
// train.on_nonfinite is stop). `bagua run` exits 4 and does not restart.
class DivergedError : public Error {
 public:
  explicit DivergedError(const std::string& message) : Error(message, false) {}
};

}  // namespace bagua
