// A one-node `bagua run` needs no network: its workers meet through a file
// of the run's (c10d's FileStore) and Gloo binds to loopback, so nothing of
// the run can be reached from another machine. Checked the way an
// administrator would: every TCP socket that the launcher and its workers
// hold, as /proc/net/tcp and tcp6 list them, sampled while the run trains.
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace bagua::testing;

// `root` and every process below it (by parent pid).
std::set<int> process_tree(int root) {
  std::map<int, int> parent;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(entry.path() / "stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid) parent[std::stoi(name)] = ppid;
  }
  std::set<int> tree{root};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [pid, ppid] : parent) {
      if (tree.count(ppid) && tree.insert(pid).second) grew = true;
    }
  }
  return tree;
}

// The socket inodes the processes hold open.
std::set<std::string> socket_inodes(const std::set<int>& pids) {
  std::set<std::string> inodes;
  for (int pid : pids) {
    std::error_code error;
    for (const auto& fd : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", error)) {
      std::error_code unreadable;
      const std::string target = fs::read_symlink(fd.path(), unreadable).string();
      if (!unreadable && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  return inodes;
}

// /proc/net/tcp{,6}'s local address (hex) is loopback: 127.0.0.0/8, ::1, or
// ::ffff:127.x.y.z. IPv4 is printed as a little-endian word: the first
// octet is the last two digits.
bool loopback(const std::string& hex) {
  if (hex.size() == 8) return hex.substr(6, 2) == "7F";
  if (hex == "00000000000000000000000001000000") return true;
  return hex.size() == 32 && hex.substr(0, 24) == "0000000000000000FFFF0000" && hex.substr(30, 2) == "7F";
}

struct SocketSeen {
  std::string local;  // ADDRESS:PORT, hex as the kernel prints it
  bool listening = false;
};

// The TCP sockets among `inodes`.
std::vector<SocketSeen> tcp_sockets(const std::set<std::string>& inodes) {
  std::vector<SocketSeen> seen;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
        continue;
      }
      if (inodes.count(inode)) seen.push_back({local, state == "0A"});
    }
  }
  return seen;
}

// Two workers train for a few seconds while the test looks at their
// sockets every 20 ms: some it must see (Gloo's connections between the
// two ranks), and every one must be on loopback. The store's directory
// (under TMPDIR) exists while the run does and is gone after it.
TEST_F(RunTest, AOneNodeRunOpensNoSocketBeyondLoopback) {
  const fs::path tmp = dir_ / "tmp";
  fs::create_directories(tmp);
  const pid_t launcher = start_bagua_run(write_recipe("quiet") +
                                             " --set train.max_steps=1500 --set checkpoint.every_steps=500"
                                             " --set train.device=cpu",
                                         dir_ / "out.txt", "TMPDIR=" + tmp.string());
  ASSERT_GT(launcher, 0);
  std::set<std::string> seen, beyond_loopback;
  bool store_dir_seen = false;
  int status = 0;
  while (::waitpid(launcher, &status, WNOHANG) == 0) {
    for (const SocketSeen& s : tcp_sockets(socket_inodes(process_tree(launcher)))) {
      seen.insert(s.local);
      if (!loopback(s.local.substr(0, s.local.find(':')))) {
        beyond_loopback.insert(s.local + (s.listening ? " (listening)" : ""));
      }
    }
    for (const auto& entry : fs::directory_iterator(tmp)) {
      store_dir_seen |= entry.path().filename().string().rfind("bagua-store.", 0) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string output = read_file(dir_ / "out.txt");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_GE(seen.size(), 2u) << "the two ranks' Gloo connection was never seen: the sampling looks at nothing\n"
                             << output;
  std::string beyond;
  for (const std::string& s : beyond_loopback) beyond += "\n  " + s;
  EXPECT_TRUE(beyond_loopback.empty()) << "sockets beyond loopback (hex address:port):" << beyond;
  EXPECT_TRUE(store_dir_seen) << "no bagua-store.* directory under TMPDIR while the run trained";
  EXPECT_TRUE(fs::is_empty(tmp)) << "the run's store directory outlived it";
}

}  // namespace
