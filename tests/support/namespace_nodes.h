// Machines for multi-node tests: network namespaces NAME-0 .. NAME-(N-1),
// each with eth0 on one bridge (in NAME-sw) at 10.79.0.(K+1), and the
// processes that run in them. Everything is created inside the namespaces
// (no interface ever sits in the host's), and deleting the namespaces
// deletes the rest, also when a test fails; namespaces of a test binary
// that died (its pid gone) are removed by the next one.
//
// Needs root and iproute2's `ip` (CI has both); unavailable() says why not.
#pragma once

#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>

namespace bagua::testing {

using Clock = std::chrono::steady_clock;

// Runs a shell command, returns its exit status; its output goes to *out.
inline int shell(const std::string& command, std::string* out = nullptr) {
  static int calls = 0;
  const fs::path capture =
      fs::temp_directory_path() / ("bagua-mn-sh-" + std::to_string(::getpid()) + "-" + std::to_string(calls++));
  const int status = std::system(("{ " + command + "; } > " + capture.string() + " 2>&1").c_str());
  if (out) *out = read_file(capture);
  fs::remove(capture);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class NamespaceNodes {
 public:
  static std::string unavailable() {
    if (::geteuid() != 0) return "network namespaces need root (CI runs as root)";
    if (shell("command -v ip") != 0) return "iproute2's `ip` is not on PATH (scripts/install-deps.sh installs it)";
    return "";
  }

  explicit NamespaceNodes(int count = 2) : count_(count) {
    remove_stale();
    static int made = 0;
    prefix_ = "bagua-mn-" + std::to_string(::getpid()) + "-" + std::to_string(made++);
    const std::string sw = prefix_ + "-sw";
    must("ip netns add " + sw);
    must("ip -n " + sw + " link add br0 type bridge");
    must("ip -n " + sw + " link set br0 up");
    for (int node = 0; node < count_; ++node) {
      const std::string ns = name(node), port = "port" + std::to_string(node);
      must("ip netns add " + ns);
      must("ip -n " + ns + " link add eth0 type veth peer name " + port + " netns " + sw);
      must("ip -n " + sw + " link set " + port + " master br0");
      must("ip -n " + sw + " link set " + port + " up");
      must("ip -n " + ns + " addr add " + address(node) + "/24 dev eth0");
      must("ip -n " + ns + " link set lo up");
      must("ip -n " + ns + " link set eth0 up");
    }
  }
  ~NamespaceNodes() { remove_all(); }
  NamespaceNodes(const NamespaceNodes&) = delete;
  NamespaceNodes& operator=(const NamespaceNodes&) = delete;

  // Makes `host` resolve to node 0 in every namespace, as a cluster's DNS
  // would: `ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts.
  void name_master(const std::string& host) { write_hosts(address(0) + " " + host + "\n"); }
  // Names node K host_name(K) ("node-K") in every namespace's hosts file;
  // NodeProcess's `host_name` gives the node that name (its own UTS
  // namespace), so a process there finds its own address from its name, as
  // torchrun's agent does.
  void name_every_node(const std::function<std::string(int)>& name_of = host_name) {
    std::string lines;
    for (int node = 0; node < count_; ++node) lines += address(node) + " " + name_of(node) + "\n";
    write_hosts(lines);
  }

  std::string name(int node) const { return prefix_ + "-" + std::to_string(node); }
  static std::string address(int node) { return "10.79.0." + std::to_string(node + 1); }
  static std::string host_name(int node) { return "node-" + std::to_string(node); }
  int count() const { return count_; }

  // Every process in node K's namespace gets SIGKILL: the machine is gone.
  void kill_node(int node) { shell("ip netns pids " + name(node) + " | xargs -r kill -9"); }

 private:
  void write_hosts(const std::string& lines) {
    for (int node = 0; node < count_; ++node) {
      const fs::path dir = fs::path("/etc/netns") / name(node);
      fs::create_directories(dir);
      std::ofstream(dir / "hosts") << "127.0.0.1 localhost\n" << lines;
    }
  }
  void remove_all() {
    for (int node = 0; node < count_; ++node) {
      kill_node(node);
      shell("ip netns del " + name(node));
      std::error_code ec;
      fs::remove_all(fs::path("/etc/netns") / name(node), ec);
    }
    shell("ip netns del " + prefix_ + "-sw");
  }
  void must(const std::string& command) {
    std::string out;
    if (shell(command, &out) != 0) {
      // The destructor will not run for a throwing constructor.
      remove_all();
      throw std::runtime_error("`" + command + "` failed: " + out);
    }
  }
  static void remove_stale() {
    static const std::regex form(R"(bagua-mn-(\d+)-\d+-(\d+|sw))");
    std::error_code ignored;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/var/run/netns", ec)) {
      std::smatch m;
      const std::string file = entry.path().filename().string();
      if (!std::regex_match(file, m, form)) continue;
      const pid_t owner = static_cast<pid_t>(std::stol(m[1].str()));
      if (owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH) {
        shell("ip netns del " + file);
        fs::remove_all(fs::path("/etc/netns") / file, ignored);
      }
    }
  }
  int count_;
  std::string prefix_;
};

// One process started in a node's namespace (as that machine's command);
// the environment has no GLOO_SOCKET_IFNAME, whatever the test's has.
class NodeProcess {
 public:
  // `bagua run ARGS` in namespace `ns`, with `env` ("A=1 B=2") added.
  NodeProcess(const std::string& ns, const std::string& args, const fs::path& output, const std::string& env = "")
      : NodeProcess(ns, std::string(BAGUA_CLI) + " run " + args, output, env, 0) {}
  // Any command line; with `host_name`, in a UTS namespace of its own with
  // that host name.
  NodeProcess(const std::string& ns, const std::string& command_line, const fs::path& output, const std::string& env,
              int, const std::string& host_name = "")
      : output_(output) {
    std::string inner = "env -u GLOO_SOCKET_IFNAME " + env + " " + command_line;
    if (!host_name.empty()) inner = "unshare --uts sh -c 'hostname " + host_name + " && exec " + inner + "'";
    const std::string command = "exec ip netns exec " + ns + " " + inner + " > " + output.string() + " 2>&1 < /dev/null";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~NodeProcess() {
    if (pid_ > 0 && !done_) {
      ::kill(-pid_, SIGKILL);
      wait();
    }
  }
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;
  // Waits (at most `limit`, then kills it) and returns its exit code.
  int wait(std::chrono::seconds limit = std::chrono::seconds(120)) {
    const auto deadline = Clock::now() + limit;
    bool killed = false;
    while (running()) {
      if (!killed && Clock::now() > deadline) {
        ADD_FAILURE() << "node still running after " << limit.count() << " s; killed it";
        ::kill(-pid_, SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return code_;
  }
  bool running() {
    if (done_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == 0) return true;
    ended_ = Clock::now();
    done_ = true;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  Clock::time_point ended() const { return ended_; }
  std::string output() const { return read_file(output_); }

 private:
  fs::path output_;
  pid_t pid_ = -1;
  bool done_ = false;
  int code_ = -1;
  Clock::time_point ended_;
};

}  // namespace bagua::testing
