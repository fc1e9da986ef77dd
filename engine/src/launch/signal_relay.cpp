#include "launch/signal_relay.h"

#include <bagua/errors.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace bagua::launch {
namespace {

constexpr int kRelayedSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGCHLD};
constexpr int kRelayedCount = sizeof(kRelayedSignals) / sizeof(kRelayedSignals[0]);

// The write end of the active relay's pipe; -1 when none is active.
std::atomic<int> g_write_fd{-1};
std::atomic<SignalRelay*> g_active{nullptr};
struct sigaction g_previous[kRelayedCount];

// Async-signal-safe: one write of one byte, errno preserved.
extern "C" void relay_signal(int signal_number) {
  int saved_errno = errno;
  int fd = g_write_fd.load();
  if (fd >= 0) {
    unsigned char byte = static_cast<unsigned char>(signal_number);
    ssize_t ignored = ::write(fd, &byte, 1);  // a full pipe already holds a wake-up
    (void)ignored;
  }
  errno = saved_errno;
}

[[noreturn]] void fail(const std::string& what) {
  throw Error("launch: " + what + ": " + std::strerror(errno));
}

}  // namespace

SignalRelay::SignalRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) fail("cannot create the signal pipe");
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  int expected = -1;
  if (!g_write_fd.compare_exchange_strong(expected, write_fd_)) {
    ::close(read_fd_);
    ::close(write_fd_);
    throw Error("launch: another signal relay is already active in this process (a second LocalSupervisor::run()?)");
  }
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = relay_signal;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < kRelayedCount; ++i) {
    action.sa_flags = SA_RESTART | (kRelayedSignals[i] == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (::sigaction(kRelayedSignals[i], &action, &g_previous[i]) != 0) {
      int saved = errno;
      for (int j = 0; j < i; ++j) ::sigaction(kRelayedSignals[j], &g_previous[j], nullptr);
      g_write_fd.store(-1);
      ::close(read_fd_);
      ::close(write_fd_);
      errno = saved;
      fail("cannot install a signal handler");
    }
  }
  installed_ = true;
  g_active.store(this);
}

SignalRelay::~SignalRelay() {
  if (installed_) {
    g_active.store(nullptr);
    for (int i = 0; i < kRelayedCount; ++i) ::sigaction(kRelayedSignals[i], &g_previous[i], nullptr);
    g_write_fd.store(-1);
  }
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalRelay::drain() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    ssize_t n = ::read(read_fd_, buffer, sizeof(buffer));
    if (n > 0) {
      signals.insert(signals.end(), buffer, buffer + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: empty
  }
  return signals;
}

int SignalRelay::take_stop() {
  for (int sig : drain()) {
    if (sig == SIGINT || sig == SIGTERM || sig == SIGUSR1) return sig;
  }
  return 0;
}

SignalRelay* SignalRelay::active() { return g_active.load(); }

}  // namespace bagua::launch
