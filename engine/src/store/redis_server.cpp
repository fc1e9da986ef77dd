// RedisServer (a private redis-server owned by its creator) and
// check_redis_hosts().
#include <bagua/redis_server.h>

#include <bagua/errors.h>
#include <bagua/system.h>

#include "store/redis_connection.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace bagua {
namespace {

// `name` resolved through PATH (as execvp would), or "" when not found.
std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The last lines of a log file, indented, for an error message.
std::string log_tail(const std::string& path) {
  if (path.empty()) return " (its output was discarded)";
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > 8) lines.erase(lines.begin());
  }
  std::string text = "; last lines of " + path + ":";
  for (const auto& line : lines) text += "\n  " + line;
  return text;
}

std::string config_text(const RedisServerOptions& o, int port) {
  std::ostringstream c;
  c << "port " << port << "\n"
    << "bind " << o.bind << "\n"
    << "maxmemory " << o.maxmemory << "\n"
    << "maxmemory-policy allkeys-random\n"
    << "save \"\"\n"
    << "appendonly no\n"
    << "daemonize no\n"
    << "logfile \"\"\n";
  if (!o.password.empty()) c << "requirepass " << o.password << "\n";
  return c.str();
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the child is gone: start_once() reports it
    done += static_cast<size_t>(n);
  }
}

}  // namespace

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)) {
  if (find_executable(options_.executable).empty())
    throw Error("data.cache: '" + options_.executable + "' was not found in PATH; install Redis (Debian: apt-get "
                "install redis-server, as scripts/install-deps.sh does) or list running servers in "
                "data.cache.hosts", true);
  std::string failure;
  const int tries = options_.port == 0 ? 3 : 1;
  for (int attempt = 0; attempt < tries; ++attempt) {
    const int port = options_.port == 0 ? find_free_port(options_.bind) : options_.port;
    if (start_once(port, &failure)) return;
  }
  throw Error("data.cache: could not start " + options_.executable + ": " + failure, true);
}

RedisServer::~RedisServer() { stop(); }

void RedisServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

bool RedisServer::start_once(int port, std::string* failure) {
  int config_pipe[2];
  if (::pipe2(config_pipe, O_CLOEXEC) != 0) throw Error(std::string("data.cache: pipe: ") + std::strerror(errno));
  const std::string log = options_.log_path.empty() ? "/dev/null" : options_.log_path;
  int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    ::close(config_pipe[0]);
    ::close(config_pipe[1]);
    throw Error("data.cache: cannot open " + log + ": " + std::strerror(errno), true);
  }
  const std::string executable = find_executable(options_.executable);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // The child, until exec: async-signal-safe calls only.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(config_pipe[0], 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    const char* argv[] = {executable.c_str(), "-", nullptr};
    ::execv(executable.c_str(), const_cast<char* const*>(argv));
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(config_pipe[0]);
  ::close(log_fd);
  if (pid < 0) {
    ::close(config_pipe[1]);
    throw Error(std::string("data.cache: cannot start redis-server (fork): ") + std::strerror(fork_errno));
  }
  pid_ = pid;
  port_ = port;
  // A closed pipe must not kill us with SIGPIPE if the server died at once.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  write_all(config_pipe[1], config_text(options_, port));
  ::sigaction(SIGPIPE, &previous, nullptr);
  ::close(config_pipe[1]);

  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  std::string last_error;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *failure = "it exited (" +
                 (WIFEXITED(status) ? "code " + std::to_string(WEXITSTATUS(status))
                                    : "signal " + std::to_string(WTERMSIG(status))) +
                 ") before answering on " + options_.bind + ":" + std::to_string(port) + log_tail(options_.log_path);
      return false;
    }
    try {
      store::RedisConnection probe(host(), options_.password, std::chrono::milliseconds(250));
      return true;
    } catch (const store::StoreError& e) {
      last_error = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop();
  *failure = "it did not answer on " + options_.bind + ":" + std::to_string(port) + " within " +
             std::to_string(options_.start_timeout.count()) + " ms (" + last_error + ")" + log_tail(options_.log_path);
  return false;
}

std::string random_secret() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(std::string("random_secret: getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string secret;
  for (unsigned char b : bytes) {
    secret.push_back(kHex[b >> 4]);
    secret.push_back(kHex[b & 15]);
  }
  return secret;
}

void check_redis_hosts(const std::vector<CacheHost>& hosts, const std::string& password,
                       std::chrono::milliseconds timeout) {
  std::string failures;
  for (const auto& host : hosts) {
    try {
      store::RedisConnection probe(host, password, timeout);
    } catch (const store::StoreError& e) {
      failures += std::string("\n  ") + e.what();
    }
  }
  if (failures.empty()) return;
  throw Error("data.cache.hosts: cannot use " + std::string(hosts.size() > 1 ? "these Redis servers" : "this Redis server") +
                  " (the password, if any, comes from " + kRedisPasswordEnv + (password.empty() ? ", which is not set" : "") +
                  "):" + failures,
              true);
}

}  // namespace bagua
