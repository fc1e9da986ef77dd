#include "bench/emulated_network.h"

#include <bagua/errors.h>

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>

namespace bagua::bench {
namespace {

// Runs argv (no shell) and returns its exit status; its combined output
// goes to *output.
int run_tool(const std::vector<std::string>& argv, std::string* output) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) output->append(buf, static_cast<size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

void must(const std::vector<std::string>& argv) {
  std::string out;
  if (run_tool(argv, &out) != 0) {
    while (!out.empty() && out.back() == '\n') out.pop_back();
    throw Error("--link: `" + joined(argv) + "` failed: " + out);
  }
}

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && ::access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Namespaces of benches that died without cleaning up: bagua-bench-<pid>-*
// whose pid is gone.
void remove_stale() {
  std::error_code ec;
  static const std::regex name(R"(bagua-bench-(\d+)-(sw|\d+))");
  for (const auto& entry : std::filesystem::directory_iterator("/var/run/netns", ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(m[1].str()));
    if (owner == ::getpid() || ::kill(owner, 0) == 0 || errno != ESRCH) continue;
    std::string ignored;
    run_tool({"ip", "netns", "del", file}, &ignored);
  }
}

}  // namespace

bool EmulatedNetwork::valid_rate(const std::string& rate) {
  static const std::regex form(R"(([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps))",
                               std::regex::icase);
  std::smatch m;
  return std::regex_match(rate, m, form) && std::stod(m[1].str()) > 0;
}

std::string EmulatedNetwork::address(int rank) { return "10.78.0." + std::to_string(rank + 1); }

EmulatedNetwork::EmulatedNetwork(int workers, const std::string& rate) {
  if (!valid_rate(rate)) {
    throw Error("--link: '" + rate + "' is not a rate; give a number and a unit: 1gbit, 500mbit, 100mbps, ...", true);
  }
  if (workers < 2 || workers > 250) throw Error("--link needs 2 to 250 workers on this machine", true);
  if (::geteuid() != 0) {
    throw Error("--link needs root (it creates network namespaces and tc rate limits); run it as root or with sudo",
                true);
  }
  for (const char* tool : {"ip", "tc"}) {
    if (!on_path(tool)) {
      throw Error(std::string("--link needs iproute2's `") + tool +
                      "` on PATH (scripts/install-deps.sh installs iproute2)",
                  true);
    }
  }
  remove_stale();
  prefix_ = "bagua-bench-" + std::to_string(::getpid());
  const std::string sw = prefix_ + "-sw";
  // Everything this constructor may have made: the namespaces, and veth
  // pairs still in this (the root) namespace, which remove() does not
  // touch (deleting either end deletes the pair; the names are this
  // process's own).
  auto remove_all = [&] {
    for (int r = 0; r < workers; ++r) {
      for (const char* end : {"v", "b"}) {
        std::string ignored;
        run_tool({"ip", "link", "del", "bb" + std::to_string(::getpid()) + end + std::to_string(r)}, &ignored);
      }
    }
    remove();
  };
  // Ctrl-C (or SIGTERM, SIGHUP) while building would leave the namespaces
  // and pairs behind: the signals wait until the network is whole (or
  // removed), then, if one came, everything is removed and the signal takes
  // its course.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &before);
  auto deliver_pending = [&] {
    sigset_t pending;
    sigpending(&pending);
    int caught = 0;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      if (sigismember(&pending, sig) && !sigismember(&before, sig)) caught = caught ? caught : sig;
    }
    if (caught) {
      remove_all();
      std::fprintf(stderr, "bagua bench: interrupted (%s) while building the emulated network; removed what was built\n",
                   strsignal(caught));
      std::signal(caught, SIG_DFL);
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);  // a pending signal is delivered here
  };
  try {
    must({"ip", "netns", "add", sw});
    namespaces_.push_back(sw);
    must({"ip", "-n", sw, "link", "add", "br0", "type", "bridge"});
    must({"ip", "-n", sw, "link", "set", "br0", "up"});
    for (int r = 0; r < workers; ++r) {
      const std::string ns = prefix_ + "-" + std::to_string(r);
      // Interface names are at most 15 characters and live in this
      // namespace until moved: unique per bench and rank.
      const std::string inner = "bb" + std::to_string(::getpid()) + "v" + std::to_string(r);
      const std::string outer = "bb" + std::to_string(::getpid()) + "b" + std::to_string(r);
      must({"ip", "netns", "add", ns});
      namespaces_.push_back(ns);
      must({"ip", "link", "add", inner, "type", "veth", "peer", "name", outer});
      must({"ip", "link", "set", inner, "netns", ns});
      must({"ip", "link", "set", outer, "netns", sw});
      must({"ip", "-n", ns, "link", "set", inner, "name", kInterface});
      must({"ip", "-n", sw, "link", "set", outer, "master", "br0"});
      must({"ip", "-n", sw, "link", "set", outer, "up"});
      must({"ip", "-n", ns, "addr", "add", address(r) + "/24", "dev", kInterface});
      must({"ip", "-n", ns, "link", "set", "lo", "up"});
      must({"ip", "-n", ns, "link", "set", kInterface, "up"});
      // Both directions limited: what leaves the machine and what reaches it.
      for (const auto& [n, dev] : {std::pair<std::string, std::string>{ns, kInterface}, {sw, outer}}) {
        must({"tc", "-n", n, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "1mb", "latency",
              "100ms"});
      }
    }
  } catch (...) {
    remove_all();
    deliver_pending();
    throw;
  }
  deliver_pending();
}

void EmulatedNetwork::remove() {
  // Deleting a namespace deletes the interfaces in it (and their peers).
  for (auto it = namespaces_.rbegin(); it != namespaces_.rend(); ++it) {
    std::string ignored;
    run_tool({"ip", "netns", "del", *it}, &ignored);
  }
  namespaces_.clear();
}

EmulatedNetwork::~EmulatedNetwork() { remove(); }

void EmulatedNetwork::enter_namespace(const std::string& prefix, int local_rank) {
  const std::string path = "/var/run/netns/" + prefix + "-" + std::to_string(local_rank);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open the network namespace " + path + ": " + std::strerror(errno));
  const int rc = ::setns(fd, CLONE_NEWNET);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw Error("cannot enter the network namespace " + path + ": " + std::strerror(saved));
}

}  // namespace bagua::bench
