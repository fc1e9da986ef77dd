// Helpers for GoogleTest tests that launch real worker processes: the test
// binary itself, re-run in scenario mode (BAGUA_TEST_SCENARIO), under
// LocalSupervisor or the real `bagua launch`.
#pragma once

#include <bagua/launch.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bagua::testing {

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return std::string(buf, n > 0 ? n : 0);
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Outcome {
  bagua::LaunchResult result;
  std::string output;  // every rank's stdout and stderr, prefixed "[rank N] "
  double seconds = 0;
};

// Runs `nproc` workers of this binary in scenario `scenario` on one node.
inline Outcome run_workers(const std::string& scenario, int nproc,
                           std::map<std::string, std::string> env = {}) {
  char path[] = "/tmp/bagua-test-XXXXXX";
  int fd = mkstemp(path);
  bagua::LaunchOptions opts;
  opts.command = {self_exe()};
  opts.nproc_per_node = nproc;
  opts.threads_per_worker = 1;
  opts.stop_grace = std::chrono::milliseconds(2000);
  opts.extra_env = std::move(env);
  opts.extra_env["BAGUA_TEST_SCENARIO"] = scenario;
  if (!opts.extra_env.count("BAGUA_TIMEOUT_S")) opts.extra_env["BAGUA_TIMEOUT_S"] = "60";
  opts.stdout_fd = fd;
  opts.stderr_fd = fd;
  Outcome out;
  auto t0 = std::chrono::steady_clock::now();
  out.result = bagua::LocalSupervisor(opts).run();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  out.output = slurp(path);
  unlink(path);
  return out;
}

// Runs `nodes` real `bagua launch` processes (simulated machines) of
// `per_node` workers each, meeting at one port, in scenario `scenario`.
inline Outcome run_nodes(const std::string& scenario, int nodes, int per_node,
                         const std::string& extra_env = "") {
  int port = bagua::find_free_port();
  std::vector<std::string> out;
  std::vector<int> codes(nodes, -1);
  std::vector<std::thread> threads;
  for (int node = 0; node < nodes; ++node) {
    out.push_back("/tmp/bagua-node" + std::to_string(node) + "-" + std::to_string(getpid()));
  }
  for (int node = 0; node < nodes; ++node) {
    threads.emplace_back([&, node] {
      std::string cmd = "BAGUA_TEST_SCENARIO=" + scenario + " BAGUA_TIMEOUT_S=60 OMP_NUM_THREADS=1 " +
                        extra_env + " " + std::string(BAGUA_CLI) + " launch --nproc-per-node " +
                        std::to_string(per_node) + " --nnodes " + std::to_string(nodes) +
                        " --node-rank " + std::to_string(node) +
                        " --master-addr 127.0.0.1 --master-port " + std::to_string(port) + " -- " +
                        self_exe() + " > " + out[node] + " 2>&1";
      codes[node] = std::system(cmd.c_str());
    });
  }
  for (auto& t : threads) t.join();
  Outcome o;
  o.result.ok = true;
  for (int node = 0; node < nodes; ++node) {
    o.result.ok = o.result.ok && codes[node] == 0;
    o.output += slurp(out[node]);
    unlink(out[node].c_str());
  }
  return o;
}

// Every rank printed its count of passed checks, with none failed.
inline void expect_all_checks_passed(const Outcome& o, int world) {
  EXPECT_TRUE(o.result.ok) << o.result.summary() << "\n" << o.output;
  for (int r = 0; r < world; ++r) {
    std::regex line("rank " + std::to_string(r) + ": ([0-9]+) checks passed, 0 failed");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(o.output, m, line)) << "rank " << r << " did not finish:\n" << o.output;
    EXPECT_GT(std::stoi(m[1]), 0) << o.output;
  }
}

}  // namespace bagua::testing
