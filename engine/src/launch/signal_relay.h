// Turns SIGINT, SIGTERM, SIGUSR1 and SIGCHLD into bytes on a pipe (the self-pipe trick),
// so the supervisor's poll() loop sees them without doing work in a handler.
//
// Constructing one installs the handlers; destroying it restores the previous
// ones. Only one may exist at a time in a process (bagua::Error otherwise).
// The run agent makes one for its whole life (no signal falls between two
// relays, and none is lost as one is destroyed); the supervisor and the
// elastic join use it through RelayInScope, which makes one of their own only
// where none exists (bagua launch, the tests).
#pragma once

#include <optional>
#include <vector>

namespace bagua::launch {

class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // Readable when a signal arrived; poll() it.
  int fd() const { return read_fd_; }

  // The signals received since the last call, in order (SIGCHLD included).
  std::vector<int> drain();

  // The first SIGINT, SIGTERM or SIGUSR1 received since the last drain, or
  // 0; drains (SIGCHLD is dropped: it only wakes a poll up).
  int take_stop();

  // The relay in force in this process, or null.
  static SignalRelay* active();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  bool installed_ = false;
};

// The relay in force, or one made for this scope when there is none.
class RelayInScope {
 public:
  RelayInScope() : relay_(SignalRelay::active()) {
    if (relay_ == nullptr) relay_ = &own_.emplace();
  }
  SignalRelay& operator*() const { return *relay_; }

 private:
  std::optional<SignalRelay> own_;
  SignalRelay* relay_;
};

}  // namespace bagua::launch
