// `bagua run` with data.cache, end to end: the real binary on a small csv
// set (64 samples, 2 workers, 3 epochs: epochs 2 and 3 read the cache).
//   - hosts null: the launcher's own redis-server; the weights equal the
//     uncached run's, and the server is gone after the run, also after a
//     worker was killed;
//   - hosts listed: a server this test owns; a cold run, then a warm one
//     whose server the test kills mid-run: both end with the uncached run's
//     weights, and each worker warns once.
// (These live with the store tests rather than in tests/run/ to keep the
// cache's tests in one small binary.)
#include <bagua/redis_server.h>

#include "store/redis_test_support.h"
#include "support/bagua_run.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <random>
#include <regex>
#include <thread>

namespace {

using namespace bagua::testing;

class CacheRunTest : public RunTest {
 protected:
  // 64 random Fashion-MNIST-shaped rows (784 features and a label).
  std::string write_csv_recipe(const std::string& name) {
    const fs::path csv = dir_ / "train.csv";
    if (!fs::exists(csv)) {
      std::ofstream out(csv);
      out << "label";
      for (int p = 0; p < 784; ++p) out << ",p" << p;
      out << "\n";
      std::mt19937 random(7);
      for (int row = 0; row < 64; ++row) {
        out << row % 10;
        for (int p = 0; p < 784; ++p) out << "," << (random() % 256) / 255.0;
        out << "\n";
      }
    }
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {torchscript: " << kSource << "/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: csv, path: " << csv.string() << ", target_column: label}\n"
                        << "  batch_size: 8\n"
                        << "optimizers: [{type: sgd, lr: 0.05, momentum: 0.9}]\n"
                        << "distributed: {nproc_per_node: 2}\n"
                        << "train: {epochs: 3, log_every_steps: 1}\n"
                        << "output: {dir: " << (dir_ / name).string() << "}\n";
    return path.string();
  }

  double final_loss(const std::string& name) {
    double loss = -1;
    for (const auto& j : metrics(dir_ / name / "metrics.jsonl"))
      if (j.contains("loss")) loss = j["loss"];
    return loss;
  }

  void expect_same_training(const std::string& name, const std::string& reference) {
    EXPECT_EQ(max_abs_diff(model_parameters(dir_ / name / "model.pt"), model_parameters(dir_ / reference / "model.pt")),
              0.0)
        << name << " vs " << reference;
    EXPECT_EQ(final_loss(name), final_loss(reference));
  }
};

// The pid in "started redis-server (pid N)", or -1.
pid_t spawned_server_pid(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("started redis-server \\(pid ([0-9]+)\\)"))) return -1;
  return static_cast<pid_t>(std::stol(m[1]));
}

// Running (a zombie left for a parent that does not reap counts as gone).
bool process_exists(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(CacheRunTest, ASpawnedServerTrainsAsWithoutTheCacheAndIsGoneAfterwards) {
  const std::string recipe = write_csv_recipe("plain");
  RunOutcome plain = bagua_run(recipe);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  const std::string cached_args = recipe + " --set output.dir=" + (dir_ / "cached").string() +
                                  " --set 'data.cache={dataset_name: e2e, writer_buffer_size: 4}'";
  RunOutcome cached = bagua_run(cached_args);
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  const pid_t pid = spawned_server_pid(cached.output);
  ASSERT_GT(pid, 0) << cached.output;
  EXPECT_FALSE(process_exists(pid)) << "the run's redis-server outlived it";
  EXPECT_NE(read_file(dir_ / "cached" / "logs" / "rank-0.log").find("(cached: redis 127.0.0.1:"), std::string::npos);
  EXPECT_EQ(cached.output.find("warning"), std::string::npos) << cached.output;
  expect_same_training("cached", "plain");

  // A worker killed at step 5: the run fails, the server still goes.
  RunOutcome crashed = bagua_run(cached_args + " --set output.dir=" + (dir_ / "crashed").string(),
                                 "BAGUA_FAULT_AT_STEP=1:5");
  EXPECT_EQ(crashed.exit_code, 3) << crashed.output;
  const pid_t crashed_pid = spawned_server_pid(crashed.output);
  ASSERT_GT(crashed_pid, 0) << crashed.output;
  EXPECT_FALSE(process_exists(crashed_pid)) << "the run's redis-server outlived a failed run";
}

TEST_F(CacheRunTest, KillingBaguaOutrightTakesItsServerWithIt) {
  const std::string recipe = write_csv_recipe("sigkilled");
  const fs::path out = dir_ / "launcher.out", pid_file = dir_ / "launcher.pid";
  const std::string command = std::string(BAGUA_CLI) + " run " + recipe +
                              " --set 'data.cache={dataset_name: sigkill}' --set train.epochs=50 > " + out.string() +
                              " 2>&1 < /dev/null & echo $! > " + pid_file.string();
  ASSERT_EQ(std::system(command.c_str()), 0);
  const pid_t launcher = std::stoi(read_file(pid_file));
  pid_t server = -1;
  for (int i = 0; i < 3000 && server < 0; ++i) {
    server = spawned_server_pid(read_file(out));
    if (server < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(server, 0) << read_file(out);
  ::kill(launcher, SIGKILL);
  for (int i = 0; i < 500 && process_exists(server); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(process_exists(server)) << "redis-server " << server << " outlived a SIGKILLed bagua";
}

TEST_F(CacheRunTest, AServerKilledMidRunChangesNothingButOneWarningPerWorker) {
  const std::string recipe = write_csv_recipe("plain");
  RunOutcome plain = bagua_run(recipe);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;

  auto server = start_test_server();
  const auto host = server->host();
  const std::string cache = " --set 'data.cache={dataset_name: killed, hosts: [{host: " + host.host +
                            ", port: " + std::to_string(host.port) + "}]}'";
  const std::string env = std::string(bagua::kRedisPasswordEnv) + "=" + server->password();
  RunOutcome cold = bagua_run(recipe + cache + " --set output.dir=" + (dir_ / "cold").string(), env);
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  expect_same_training("cold", "plain");
  EXPECT_EQ(connect_to(*server)->command({"DBSIZE"})->integer, 64) << "every sample cached";

  // The warm run: rank 0 stops itself at step 6 (epoch 2); the test kills
  // the server, then lets rank 0 go on.
  const std::string warm_recipe = write_csv_recipe("warm");
  RunOutcome warm;
  std::thread run([&] { warm = bagua_run(warm_recipe + cache, env + " BAGUA_STOP_AT_STEP=0:6"); });
  const pid_t stopped = stopped_worker(warm_recipe);
  server->stop();
  if (stopped > 0) ::kill(stopped, SIGCONT);
  run.join();
  ASSERT_GT(stopped, 0) << warm.output;
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  expect_same_training("warm", "plain");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_file(dir_ / "warm" / "logs" / ("rank-" + std::to_string(rank) + ".log"));
    EXPECT_EQ(count(log, "dataset cache 'killed' unavailable"), 1u) << log;
  }
}

TEST_F(CacheRunTest, AnUnreachableHostIsAUserErrorBeforeAnyWorkerStarts) {
  const std::string recipe = write_csv_recipe("unreachable");
  const int port = bagua::find_free_port();
  RunOutcome r = bagua_run(recipe + " --set 'data.cache={hosts: [{host: 127.0.0.1, port: " + std::to_string(port) +
                           "}]}'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "unreachable" / "logs")) << "no worker may have started";
}

}  // namespace
