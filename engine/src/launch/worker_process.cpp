#include "launch/worker_process.h"

#include <bagua/errors.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <unistd.h>

namespace bagua::launch {
namespace {

[[noreturn]] void fail(const std::string& what, int error) {
  throw Error("launch: " + what + ": " + std::strerror(error));
}

struct Pipe {
  UniqueFd read_end, write_end;
};

Pipe make_pipe(const char* purpose) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail(std::string("cannot create a pipe for ") + purpose, errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// The child between fork() and exec: async-signal-safe calls only.
[[noreturn]] void exec_child(const std::vector<char*>& paths, char* const* argv, char* const* envp,
                             int stdin_fd, int stdout_fd, int stderr_fd, int status_fd, pid_t supervisor) {
  // A worker dies with its supervisor (an OOM kill, kill -9, a lost ssh
  // session that took `bagua run` with it): SIGKILL when the forking thread
  // ends. The supervisor forks from its main thread, which lives as long as
  // it does. If it died before this line, the parent is already someone else.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != supervisor) ::_exit(137);
  // Our relay handlers must not run here, and workers expect default
  // SIGPIPE/SIGXFSZ even when this process ignores them (as torchrun's do).
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGCHLD, SIGPIPE, SIGXFSZ}) ::sigaction(sig, &default_action, nullptr);
  ::setpgid(0, 0);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(stdout_fd, 1) < 0 || ::dup2(stderr_fd, 2) < 0) {
    int error = errno;
    ssize_t ignored = ::write(status_fd, &error, sizeof(error));
    (void)ignored;
    ::_exit(127);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  // Like execvp: keep looking past "not here", remember "here but not allowed".
  int error = ENOENT;
  bool denied = false;
  for (char* path : paths) {
    if (path == nullptr) break;
    ::execve(path, argv, envp);
    if (errno == EACCES) {
      denied = true;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      error = errno;
      break;
    }
  }
  if (denied && (error == ENOENT)) error = EACCES;
  ssize_t ignored = ::write(status_fd, &error, sizeof(error));
  (void)ignored;
  ::_exit(error == ENOENT ? 127 : 126);
}

void make_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail("cannot configure a pipe", errno);
}

}  // namespace

std::vector<std::string> exec_candidates(const std::string& name, const std::string& path_value) {
  if (name.find('/') != std::string::npos) return {name};
  if (name.empty()) return {};
  std::vector<std::string> candidates;
  size_t begin = 0;
  for (;;) {
    size_t end = path_value.find(':', begin);
    std::string dir = path_value.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (dir.empty()) dir = ".";
    candidates.push_back(dir + "/" + name);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return candidates;
}

StartedWorker start_worker(const WorkerPlan& plan, int stdin_fd) {
  Pipe out = make_pipe("worker stdout");
  Pipe err = make_pipe("worker stderr");
  Pipe status = make_pipe("exec status");
  std::vector<char*> argv = c_strings(plan.argv);
  std::vector<char*> envp = c_strings(plan.env);
  std::vector<char*> paths = c_strings(plan.exec_paths);
  make_nonblocking(out.read_end.get());
  make_nonblocking(err.read_end.get());

  // Signals stay blocked across fork() so no handler of this process runs in
  // the child before it has reset them.
  sigset_t all, previous;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &previous);
  const pid_t supervisor = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    exec_child(paths, argv.data(), envp.data(), stdin_fd, out.write_end.get(), err.write_end.get(),
               status.write_end.get(), supervisor);
  }
  int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) fail("cannot start a worker (fork)", fork_error);

  // Also here, so the group exists before anyone signals it (the child may
  // have exec'd already, which makes this fail harmlessly).
  ::setpgid(pid, pid);
  out.write_end.reset();
  err.write_end.reset();
  status.write_end.reset();

  StartedWorker worker;
  worker.pid = pid;
  // The status pipe closes on a successful exec; otherwise the child sends errno first.
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(status.read_end.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  worker.exec_errno = (n == static_cast<ssize_t>(sizeof(child_errno))) ? child_errno : 0;
  worker.stdout_fd = std::move(out.read_end);
  worker.stderr_fd = std::move(err.read_end);
  return worker;
}

}  // namespace bagua::launch
