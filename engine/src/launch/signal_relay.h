// Turns SIGINT, SIGTERM, SIGUSR1 and SIGCHLD into bytes on a pipe (the self-pipe trick),
// so the supervisor's poll() loop sees them without doing work in a handler.
//
// Constructing one installs the handlers; destroying it restores the previous
// ones. Only one may exist at a time in a process (bagua::Error otherwise).
#pragma once

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

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  bool installed_ = false;
};

}  // namespace bagua::launch
