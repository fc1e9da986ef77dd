// LocalSupervisor and `bagua launch` against real processes: /bin/sh scripts
// as workers, the real bagua binary, real signals. Workers leave evidence in
// a temporary directory (their environment, their pids) for the checks.
#include <bagua/errors.h>
#include <bagua/launch.h>

#include "comm/c10d_compat.h"
#include "common/libtorch_compat.h"
#include "common/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sched.h>
#include <set>
#include <sstream>
#include <string>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "bagua-launch-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    bagua::compat::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A file that stands in for the terminal: LaunchOptions::stdout_fd/stderr_fd.
class CaptureFile {
 public:
  explicit CaptureFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot open " + path_);
  }
  ~CaptureFile() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string text() const { return read_file(path_); }
  std::vector<std::string> lines() const { return lines_of(text()); }

 private:
  std::string path_;
  int fd_;
};

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// Options whose forwarded output lands in the two capture files.
bagua::LaunchOptions options_for(const std::string& script, int nproc, const CaptureFile& out,
                                 const CaptureFile& err) {
  bagua::LaunchOptions options;
  options.command = sh(script);
  options.nproc_per_node = nproc;
  options.stdout_fd = out.fd();
  options.stderr_fd = err.fd();
  options.stop_grace = 2000ms;
  return options;
}

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> env;
  for (const auto& line : lines_of(text)) {
    auto equals = line.find('=');
    if (equals != std::string::npos) env[line.substr(0, equals)] = line.substr(equals + 1);
  }
  return env;
}

bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

// Pids the workers wrote to DIR/pid.RANK (one per rank, complete lines).
std::vector<pid_t> wait_for_pids(const TempDir& dir, int count) {
  std::vector<pid_t> pids;
  wait_until(
      [&] {
        pids.clear();
        for (int rank = 0; rank < count; ++rank) {
          std::string text = read_file(dir / ("pid." + std::to_string(rank)));
          if (text.empty() || text.back() != '\n') return false;
          pids.push_back(std::stoi(text));
        }
        return true;
      },
      10s);
  return pids;
}

// A process that is gone (kill -0 fails). Orphans are reaped by init, so allow a moment.
bool process_gone(pid_t pid) {
  return wait_until([&] { return ::kill(pid, 0) != 0 && errno == ESRCH; }, 5s);
}

int cores_available() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
}

// Runs the real `bagua` binary with stdout/stderr to files; returns its pid.
pid_t start_cli(const std::vector<std::string>& args, const std::string& out_path,
                const std::string& err_path) {
  std::vector<std::string> argv = {BAGUA_CLI};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (auto& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) ::_exit(120);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(c_argv[0], c_argv.data());
    ::_exit(121);
  }
  return pid;
}

// The exit code of a child, or 1000 + signal when it died on one.
int wait_exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

struct CliRun {
  int exit_code;
  std::string out, err;
};

CliRun run_cli(const std::vector<std::string>& args) {
  TempDir dir;
  pid_t pid = start_cli(args, dir / "out", dir / "err");
  int code = wait_exit_code(pid);
  return {code, read_file(dir / "out"), read_file(dir / "err")};
}

// ---------------------------------------------------------------------------
// Environment and rendezvous port

TEST(LaunchEnvironment, EveryRankGetsTorchrunVariables) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  ::unsetenv("OMP_NUM_THREADS");
  auto options = options_for("env > \"$ENV_DIR/env.$LOCAL_RANK\"", 3, out, err);
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_addr = "10.1.2.3";
  options.master_port = 29517;
  options.threads_per_worker = 2;
  options.extra_env = {{"ENV_DIR", dir.path().string()}, {"BAGUA_TEST_EXTRA", "yes"}};
  bagua::LocalSupervisor supervisor(options);
  bagua::LaunchResult result = supervisor.run();
  ASSERT_TRUE(result.ok) << result.summary();

  for (int local_rank = 0; local_rank < 3; ++local_rank) {
    SCOPED_TRACE("local rank " + std::to_string(local_rank));
    auto env = parse_env(read_file(dir / ("env." + std::to_string(local_rank))));
    std::string rank = std::to_string(3 + local_rank);
    EXPECT_EQ(env["RANK"], rank);
    EXPECT_EQ(env["ROLE_RANK"], rank);
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local_rank));
    EXPECT_EQ(env["WORLD_SIZE"], "6");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
    EXPECT_EQ(env["MASTER_PORT"], "29517");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "2");
    EXPECT_EQ(env["BAGUA_TEST_EXTRA"], "yes");
    EXPECT_FALSE(env["PATH"].empty()) << "the supervisor's own environment is inherited";
  }
  ASSERT_EQ(result.workers.size(), 3u);
  EXPECT_EQ(result.workers[2].rank, 5);
  EXPECT_EQ(supervisor.master_port(), 29517);
}

TEST(LaunchEnvironment, OmpThreadsDefaultsToCoresPerWorkerAndKeepsUserValue) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  ::unsetenv("OMP_NUM_THREADS");
  auto options = options_for("echo $OMP_NUM_THREADS > \"$ENV_DIR/omp.$RANK\"", 2, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  ASSERT_TRUE(bagua::LocalSupervisor(options).run().ok);
  std::string expected = std::to_string(std::max(1, cores_available() / 2)) + "\n";
  EXPECT_EQ(read_file(dir / "omp.0"), expected);
  EXPECT_EQ(read_file(dir / "omp.1"), expected);

  ::setenv("OMP_NUM_THREADS", "7", 1);
  options.threads_per_worker = 3;
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ::unsetenv("OMP_NUM_THREADS");
  ASSERT_TRUE(result.ok);
  EXPECT_EQ(read_file(dir / "omp.1"), "7\n") << "a value already in the environment wins";
}

TEST(LaunchEnvironment, FreePortIsChosenOnceAndSharedByAllRanks) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  auto options = options_for("echo $MASTER_PORT > \"$ENV_DIR/port.$RANK\"", 3, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  ASSERT_EQ(options.master_port, 0);
  bagua::LocalSupervisor supervisor(options);
  ASSERT_TRUE(supervisor.run().ok);
  int port = supervisor.master_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(read_file(dir / ("port." + std::to_string(rank))), std::to_string(port) + "\n");
  }
}

TEST(LaunchEnvironment, FindFreePortReturnsABindablePort) {
  int port = bagua::find_free_port();
  ASSERT_GT(port, 0);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  ::close(fd);
}

// ---------------------------------------------------------------------------
// Options

TEST(LaunchOptions, InvalidValuesThrowConfigErrorNamingTheOption) {
  auto expect_rejected = [](bagua::LaunchOptions options, const std::string& option) {
    try {
      bagua::LocalSupervisor supervisor(options);
      ADD_FAILURE() << "accepted a bad " << option;
    } catch (const bagua::ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(option));
    }
  };
  bagua::LaunchOptions good;
  good.command = {"true"};
  EXPECT_NO_THROW(bagua::LocalSupervisor{good});

  auto o = good;
  o.command.clear();
  expect_rejected(o, "command");
  o = good;
  o.nproc_per_node = 0;
  expect_rejected(o, "nproc_per_node");
  o = good;
  o.nnodes = 2;
  o.node_rank = 2;
  o.master_port = 29500;
  expect_rejected(o, "node_rank");
  o = good;
  o.nnodes = 2;
  expect_rejected(o, "master_port");  // 0 = "pick one" cannot work across nodes
  o = good;
  o.master_port = 70000;
  expect_rejected(o, "master_port");
  o = good;
  o.echo_rank = 1;
  expect_rejected(o, "echo_rank");
  o = good;
  o.extra_env = {{"A=B", "x"}};
  expect_rejected(o, "extra_env");
  o = good;
  o.threads_per_worker = -1;
  expect_rejected(o, "threads_per_worker");
}

// ---------------------------------------------------------------------------
// Output forwarding

TEST(LaunchOutput, LinesArePrefixedPerRankAndNeverMixed) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  // Every rank writes 200 long lines; rank 0 also writes one line in three
  // pieces with pauses in between, while the others are busy writing; every
  // rank ends with a line that has no newline.
  std::string script = R"(
    payload=$(printf "%0300d" 0)
    if [ "$RANK" = 0 ]; then
      printf 'piece-one,'; sleep 0.1; printf 'piece-two,'; sleep 0.1; printf 'piece-three\n'
    fi
    i=0
    while [ $i -lt 200 ]; do printf 'r%s-%s-%s\n' "$RANK" "$i" "$payload"; i=$((i+1)); done
    echo "to-stderr $RANK" >&2
    printf 'unterminated %s' "$RANK"
  )";
  bagua::LaunchResult result = bagua::LocalSupervisor(options_for(script, 4, out, err)).run();
  ASSERT_TRUE(result.ok) << result.summary();

  std::regex prefixed(R"(\[rank (\d)\] (.*))");
  std::map<int, int> counted;
  std::set<std::string> seen;
  for (const auto& line : out.lines()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, prefixed)) << "not a whole prefixed line: " << line.substr(0, 120);
    std::string rank = m[1], payload = m[2];
    seen.insert(line);
    if (payload.rfind("r", 0) == 0) {
      ASSERT_TRUE(std::regex_match(payload, std::regex("r" + rank + R"(-\d+-0{300})")))
          << "line of rank " << rank << " mixed with another: " << payload.substr(0, 120);
      ++counted[std::stoi(rank)];
    }
  }
  EXPECT_TRUE(seen.count("[rank 0] piece-one,piece-two,piece-three"));
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(counted[rank], 200) << "rank " << rank;
    std::string r = std::to_string(rank);
    EXPECT_TRUE(seen.count("[rank " + r + "] unterminated " + r)) << "partial last line of rank " << r;
  }
  auto err_lines = err.lines();
  std::multiset<std::string> stderr_lines(err_lines.begin(), err_lines.end());
  EXPECT_EQ(stderr_lines, (std::multiset<std::string>{"[rank 0] to-stderr 0", "[rank 1] to-stderr 1",
                                                      "[rank 2] to-stderr 2", "[rank 3] to-stderr 3"}));
}

TEST(LaunchOutput, NoPrefixForwardsLinesUnchanged) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  auto options = options_for("echo \"plain $RANK\"", 2, out, err);
  options.prefix_output = false;
  ASSERT_TRUE(bagua::LocalSupervisor(options).run().ok);
  auto lines = out.lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"plain 0", "plain 1"}));
}

TEST(LaunchOutput, LogDirGetsEveryRankAndEchoRankFiltersTheTerminal) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  auto options = options_for("echo \"out $RANK\"; echo \"err $RANK\" >&2", 3, out, err);
  options.log_dir = dir / "logs/nested";  // does not exist yet
  options.echo_rank = 1;
  ASSERT_TRUE(bagua::LocalSupervisor(options).run().ok);

  EXPECT_EQ(out.lines(), std::vector<std::string>{"[rank 1] out 1"});
  EXPECT_EQ(err.lines(), std::vector<std::string>{"[rank 1] err 1"});
  for (int rank = 0; rank < 3; ++rank) {
    std::string r = std::to_string(rank);
    auto logged = lines_of(read_file(dir / ("logs/nested/rank-" + r + ".log")));
    std::sort(logged.begin(), logged.end());
    EXPECT_EQ(logged, (std::vector<std::string>{"err " + r, "out " + r})) << "rank " << r;
  }
}

// ---------------------------------------------------------------------------
// Failures

TEST(LaunchFailure, FirstFailureStopsTheOthersQuickly) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  std::string script = R"(
    if [ "$RANK" = 2 ]; then
      # fail only once the others are up, so they really have to be stopped
      while [ ! -s "$ENV_DIR/pid.0" ] || [ ! -s "$ENV_DIR/pid.1" ] || [ ! -s "$ENV_DIR/pid.3" ]; do sleep 0.05; done
      echo "about to fail"; exit 3
    fi
    echo $$ > "$ENV_DIR/pid.tmp.$RANK"; mv "$ENV_DIR/pid.tmp.$RANK" "$ENV_DIR/pid.$RANK"
    exec sleep 60
  )";
  auto options = options_for(script, 4, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  auto started = std::chrono::steady_clock::now();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  auto elapsed = std::chrono::steady_clock::now() - started;

  EXPECT_LT(elapsed, 15s);
  EXPECT_FALSE(result.ok);
  EXPECT_FALSE(result.interrupted);
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 2);
  EXPECT_EQ(result.first_failure->describe(), "exit code 3");
  ASSERT_EQ(result.workers.size(), 4u);
  for (int rank : {0, 1, 3}) {
    EXPECT_TRUE(result.workers[rank].stopped_by_supervisor) << "rank " << rank;
    EXPECT_TRUE(result.workers[rank].signaled) << "rank " << rank;
    EXPECT_EQ(result.workers[rank].status, SIGTERM) << "rank " << rank;
  }
  EXPECT_FALSE(result.workers[2].stopped_by_supervisor);
  EXPECT_EQ(result.failure_tail, std::vector<std::string>{"about to fail"});
  std::string summary = result.summary();
  EXPECT_THAT(summary, HasSubstr("rank 2 (local rank 2) failed with exit code 3"));
  EXPECT_THAT(summary, HasSubstr("stopped the other 3 workers"));
  EXPECT_THAT(summary, HasSubstr("about to fail"));
  for (int rank : {0, 1, 3}) {
    pid_t pid = std::stoi(read_file(dir / ("pid." + std::to_string(rank))));
    EXPECT_TRUE(process_gone(pid)) << "worker of rank " << rank << " still alive";
  }
}

// Two nodes' supervisors sharing node 0's rendezvous store: a worker that
// fails on node 1 stops node 0's at once (they would otherwise wait for their
// timeout), and node 0's result names node 1 and the rank.
TEST(LaunchFailure, AFailureOnAnotherNodeStopsThisOneNamingIt) {
  TempDir dir;
  CaptureFile out0(dir / "out0"), err0(dir / "err0"), out1(dir / "out1"), err1(dir / "err1");
  bagua::RendezvousServer store("127.0.0.1", 0);
  auto node = [&](int rank, const std::string& script, const CaptureFile& out, const CaptureFile& err) {
    auto options = options_for(script, 1, out, err);
    options.nnodes = 2;
    options.node_rank = rank;
    options.master_port = store.port();
    options.watch_progress = true;
    return options;
  };
  auto o0 = node(0, "exec sleep 60", out0, err0);
  auto o1 = node(1, "sleep 1; echo 'bad input'; exit 7", out1, err1);
  bagua::LaunchResult results[2];
  auto started = std::chrono::steady_clock::now();
  // One supervisor per process, as on two machines: node 1 in a child.
  pid_t node1 = ::fork();
  if (node1 == 0) {
    bagua::LaunchResult r = bagua::LocalSupervisor(o1).run();
    ::_exit(r.first_failure && r.first_failure->rank == 1 && r.first_failure->status == 7 ? 0 : 1);
  }
  ASSERT_GT(node1, 0);
  results[0] = bagua::LocalSupervisor(o0).run();
  int status = 0;
  ASSERT_EQ(::waitpid(node1, &status, 0), node1);
  auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_LT(elapsed, 15s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "node 1 saw its rank 1 fail with exit code 7";
  EXPECT_FALSE(results[0].ok);
  EXPECT_FALSE(results[0].first_failure.has_value()) << "node 0's worker did not fail: it was stopped";
  EXPECT_EQ(results[0].remote_failure, "node 1: rank 1 failed with exit code 7");
  EXPECT_THAT(results[0].summary(), HasSubstr("another node failed (node 1: rank 1 failed with exit code 7)"));
  EXPECT_TRUE(results[0].workers[0].stopped_by_supervisor);
}

TEST(LaunchFailure, WorkerIgnoringSigtermIsKilledAfterTheGrace) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  // Rank 1 ignores SIGTERM (and so does its sleep, which inherits that);
  // rank 0 fails once it has.
  auto options = options_for(R"(
    if [ $RANK = 0 ]; then
      while [ ! -e "$ENV_DIR/ready" ]; do sleep 0.05; done; sleep 0.3; exit 1
    fi
    trap '' TERM; touch "$ENV_DIR/ready"; sleep 60
  )", 2, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  options.stop_grace = 400ms;
  auto started = std::chrono::steady_clock::now();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_GE(elapsed, 700ms);  // 0.3 s before the failure, then the whole grace
  EXPECT_LT(elapsed, 10s);
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 0);
  EXPECT_TRUE(result.workers[1].stopped_by_supervisor);
  EXPECT_TRUE(result.workers[1].signaled);
  EXPECT_EQ(result.workers[1].status, SIGKILL);
}

// A rank that finds bad input and leaves makes its peers fail too (their
// connection to it closes), and a peer may well exit first. With
// cause_statuses the rank whose exit code names the cause is reported;
// without, the first to exit. Rank 0 here fails only once the supervisor has
// seen rank 1's failure (its SIGTERM), so the order is certain.
TEST(LaunchFailure, ARankExitingWithACauseStatusIsNamedEvenWhenAPeerFailedFirst) {
  for (bool with_causes : {true, false}) {
    SCOPED_TRACE(with_causes ? "with cause_statuses" : "without");
    TempDir dir;
    CaptureFile out(dir / "out"), err(dir / "err");
    auto options = options_for(R"(
      if [ $RANK = 0 ]; then
        trap 'touch "$ENV_DIR/term"' TERM
        touch "$ENV_DIR/ready"
        while [ ! -e "$ENV_DIR/term" ]; do sleep 0.05; done
        echo "column 'lable' is not in data.csv"; exit 2
      fi
      while [ ! -e "$ENV_DIR/ready" ]; do sleep 0.05; done
      echo "Connection closed by peer"; exit 1
    )", 2, out, err);
    options.extra_env = {{"ENV_DIR", dir.path().string()}};
    if (with_causes) options.cause_statuses = {2, 4};
    bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
    ASSERT_TRUE(result.first_failure.has_value());
    ASSERT_EQ(result.workers.size(), 2u);
    EXPECT_EQ(result.workers[0].status, 2);
    EXPECT_EQ(result.workers[1].status, 1);
    if (with_causes) {
      EXPECT_EQ(result.first_failure->rank, 0);
      EXPECT_EQ(result.first_failure->describe(), "exit code 2");
      EXPECT_FALSE(result.workers[0].stopped_by_supervisor);
      ASSERT_FALSE(result.failure_tail.empty());  // (sh may first say its sleep was "Terminated")
      EXPECT_EQ(result.failure_tail.back(), "column 'lable' is not in data.csv");
      EXPECT_THAT(result.summary(), HasSubstr("rank 0 (local rank 0) failed with exit code 2"));
      EXPECT_THAT(result.summary(), HasSubstr("rank 1 (exit code 1)"));
    } else {
      EXPECT_EQ(result.first_failure->rank, 1);
      EXPECT_TRUE(result.workers[0].stopped_by_supervisor);
      EXPECT_EQ(result.failure_tail, std::vector<std::string>{"Connection closed by peer"});
    }
  }
}

// A rank killed from outside and a peer failing on the broken connection a
// moment later are often both found dead in one look of the supervisor:
// the killed rank is the cause, whatever the ranks' order. Here the
// supervisor is held in its stop_when hook (asked from its loop) until both
// are dead, so one pass finds both, rank 0 (the echo) first in rank order.
TEST(LaunchFailure, OfWorkersFoundDeadTogetherTheOneKilledIsTheCause) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  auto options = options_for(R"sh(
    echo $$ > "$ENV_DIR/pid-$RANK.tmp" && mv "$ENV_DIR/pid-$RANK.tmp" "$ENV_DIR/pid-$RANK"
    while [ ! -e "$ENV_DIR/go" ]; do sleep 0.02; done
    if [ $RANK = 1 ]; then kill -9 $$; fi
    while [ "$(cut -d' ' -f3 /proc/$(cat "$ENV_DIR/pid-1")/stat)" != Z ]; do sleep 0.01; done
    echo "Connection reset by peer"; exit 3
  )sh", 2, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  auto state = [&](int rank) {
    const std::string pid = read_file(dir / ("pid-" + std::to_string(rank)));
    if (pid.empty()) return std::string();
    const std::string stat = read_file("/proc/" + std::to_string(std::stoi(pid)) + "/stat");
    const size_t close = stat.rfind(')');
    return close == std::string::npos || close + 2 >= stat.size() ? std::string() : stat.substr(close + 2, 1);
  };
  bool held = false;
  options.stop_when = [&]() -> std::optional<std::string> {
    if (held) return std::nullopt;
    held = true;
    EXPECT_TRUE(wait_until([&] { return !state(0).empty() && !state(1).empty(); }, 10s));
    std::ofstream(dir / "go").put('\n');
    EXPECT_TRUE(wait_until([&] { return state(0) == "Z" && state(1) == "Z"; }, 10s));
    return std::nullopt;
  };
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 1);
  EXPECT_TRUE(result.first_failure->signaled);
  EXPECT_EQ(result.first_failure->status, SIGKILL);
  EXPECT_EQ(result.workers[0].status, 3);
  EXPECT_THAT(result.summary(), HasSubstr("rank 1 (local rank 1) failed with signal 9 (SIGKILL)"));
}

// Of ranks that both exit 4 (a diverged training), the cause is the one
// whose first non-finite step ran earliest as the ranks told the launcher
// (their progress reports, common/progress.h), not the first to exit.
// The reports are written here, as workers would; rank 0 exits 4 first,
// rank 1 only once the launcher's SIGTERM reaches it.
TEST(LaunchFailure, OfRanksThatDivergedTheEarliestIsTheCauseNotTheFirstToExit) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  bagua::RendezvousServer server("127.0.0.1", 0);
  {
    auto store = bagua::comm::make_prefix_store(
        "attempt-0/", bagua::comm::make_tcp_store("127.0.0.1", server.port(), false, 1, std::chrono::seconds(10)));
    const int64_t t = 1795000000000;
    for (auto [rank, diverged] : {std::pair<int, int64_t>{0, t + 40}, {1, t}}) {
      store->set(bagua::progress::rank_key(rank),
                 bagua::progress::encode({1, 12, 0, diverged, bagua::progress::kExitedPhase}));
    }
  }
  auto options = options_for(R"sh(
    if [ $RANK = 0 ]; then
      while [ ! -e "$ENV_DIR/ready" ]; do sleep 0.02; done
      echo "diverged at step 13 on rank 0"; exit 4
    fi
    trap 'echo "diverged at step 11 on rank 1"; exit 4' TERM
    touch "$ENV_DIR/ready"
    while :; do sleep 0.02; done
  )sh", 2, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  options.master_port = server.port();
  options.watch_progress = true;
  options.cause_statuses = {2, 4};
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 1);
  EXPECT_EQ(result.first_failure->describe(), "exit code 4");
  EXPECT_EQ(result.workers[0].status, 4);
  EXPECT_FALSE(result.workers[0].stopped_by_supervisor) << "rank 0 left on its own";
  EXPECT_FALSE(result.workers[1].stopped_by_supervisor) << "rank 1 is the cause, not a worker stopped for it";
  EXPECT_THAT(result.summary(), HasSubstr("rank 1 (local rank 1) failed with exit code 4"));
  EXPECT_THAT(result.summary(), HasSubstr("also failed before they were stopped (perhaps because of it): rank 0 (exit code 4)"));
  // (sh may also say its sleep was "Terminated")
  EXPECT_THAT(result.failure_tail, ::testing::Contains("diverged at step 11 on rank 1"));
}

TEST(LaunchFailure, DeathBySignalIsNamed) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  bagua::LaunchResult result = bagua::LocalSupervisor(options_for("ulimit -c 0; echo crashing; kill -SEGV $$", 1, out, err)).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_TRUE(result.first_failure->signaled);
  EXPECT_EQ(result.first_failure->status, SIGSEGV);
  EXPECT_EQ(result.first_failure->describe(), "signal 11 (SIGSEGV)");
  EXPECT_THAT(result.summary(), HasSubstr("rank 0 (local rank 0) failed with signal 11 (SIGSEGV)"));
  EXPECT_THAT(result.summary(), HasSubstr("crashing"));
}

TEST(LaunchFailure, MissingCommandIsReported) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  bagua::LaunchOptions options;
  options.command = {"bagua-test-no-such-command", "--flag"};
  options.stdout_fd = out.fd();
  options.stderr_fd = err.fd();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->status, 127);
  EXPECT_FALSE(result.first_failure->signaled);
  std::string message = "could not execute 'bagua-test-no-such-command': No such file or directory";
  EXPECT_EQ(result.first_failure->exec_error, message);
  EXPECT_THAT(result.summary(), HasSubstr(message));
  EXPECT_THAT(err.text(), HasSubstr("[rank 0] " + message));
}

TEST(LaunchFailure, CommandIsLookedUpInTheWorkersPath) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  fs::create_directory(dir / "bin");
  std::ofstream(dir / "bin/bagua-test-worker") << "#!/bin/sh\necho found as $RANK\n";
  fs::permissions(dir / "bin/bagua-test-worker", fs::perms::owner_all);
  bagua::LaunchOptions options;
  options.command = {"bagua-test-worker"};
  options.extra_env = {{"PATH", (dir / "bin") + ":/usr/bin:/bin"}};
  options.stdout_fd = out.fd();
  options.stderr_fd = err.fd();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  EXPECT_TRUE(result.ok) << result.summary();
  EXPECT_EQ(out.lines(), std::vector<std::string>{"[rank 0] found as 0"});
}

TEST(LaunchFailure, NonExecutableCommandIsReported) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  std::ofstream(dir / "script.sh") << "#!/bin/sh\necho hi\n";  // mode 0644: not executable
  bagua::LaunchOptions options;
  options.command = {dir / "script.sh"};
  options.stdout_fd = out.fd();
  options.stderr_fd = err.fd();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->status, 126);
  EXPECT_THAT(result.first_failure->exec_error, HasSubstr("Permission denied"));
}

TEST(LaunchFailure, TailKeepsOnlyTheLastLinesOfTheFailedRank) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  auto options = options_for("for i in 1 2 3 4 5 6; do echo \"line $i of $RANK\"; done; [ $RANK = 0 ] || exit 5",
                             2, out, err);
  options.tail_lines = 3;
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  ASSERT_TRUE(result.first_failure.has_value());
  EXPECT_EQ(result.first_failure->rank, 1);
  EXPECT_EQ(result.failure_tail,
            (std::vector<std::string>{"line 4 of 1", "line 5 of 1", "line 6 of 1"}));
}

TEST(LaunchSignals, SigintStopsWorkersAndRestoresHandlers) {
  TempDir dir;
  CaptureFile out(dir / "out"), err(dir / "err");
  struct sigaction before_int, before_term, after_int, after_term;
  ::sigaction(SIGINT, nullptr, &before_int);
  ::sigaction(SIGTERM, nullptr, &before_term);

  auto options = options_for("echo $$ > \"$ENV_DIR/pid.tmp.$RANK\"; mv \"$ENV_DIR/pid.tmp.$RANK\" "
                             "\"$ENV_DIR/pid.$RANK\"; exec sleep 60",
                             2, out, err);
  options.extra_env = {{"ENV_DIR", dir.path().string()}};
  std::vector<pid_t> pids;
  std::thread interrupter([&] {
    pids = wait_for_pids(dir, 2);
    ::kill(::getpid(), SIGINT);
  });
  auto started = std::chrono::steady_clock::now();
  bagua::LaunchResult result = bagua::LocalSupervisor(options).run();
  auto elapsed = std::chrono::steady_clock::now() - started;
  interrupter.join();

  EXPECT_LT(elapsed, 15s);
  EXPECT_TRUE(result.interrupted);
  EXPECT_EQ(result.interrupt_signal, SIGINT);
  EXPECT_FALSE(result.ok);
  EXPECT_FALSE(result.first_failure.has_value());
  for (const auto& w : result.workers) EXPECT_TRUE(w.stopped_by_supervisor) << "rank " << w.rank;
  EXPECT_THAT(result.summary(), HasSubstr("interrupted by SIGINT"));
  ASSERT_EQ(pids.size(), 2u);
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << "worker " << pid << " still alive";

  ::sigaction(SIGINT, nullptr, &after_int);
  ::sigaction(SIGTERM, nullptr, &after_term);
  EXPECT_EQ(after_int.sa_handler, before_int.sa_handler);
  EXPECT_EQ(after_term.sa_handler, before_term.sa_handler);
}

// ---------------------------------------------------------------------------
// The bagua launch command

TEST(LaunchCli, SucceedsWithPrefixedOutput) {
  CliRun run = run_cli({"launch", "--nproc-per-node", "2", "--", "sh", "-c", "echo \"hello $RANK of $WORLD_SIZE\""});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  auto lines = lines_of(run.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[rank 0] hello 0 of 2", "[rank 1] hello 1 of 2"}));
}

TEST(LaunchCli, NoPrefixAndLogDirFlags) {
  TempDir dir;
  CliRun run = run_cli({"launch", "--no-prefix", "--log-dir", dir / "logs", "--", "sh", "-c", "echo raw"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "raw\n");
  EXPECT_EQ(read_file(dir / "logs/rank-0.log"), "raw\n");
}

TEST(LaunchCli, WorkerFailureExits3WithSummaryOnStderr) {
  CliRun run = run_cli({"launch", "--nproc-per-node", "2", "--", "sh", "-c",
                        "if [ $RANK = 1 ]; then echo 'bad things' >&2; exit 3; fi; sleep 60"});
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_THAT(run.err, HasSubstr("rank 1 (local rank 1) failed with exit code 3"));
  EXPECT_THAT(run.err, HasSubstr("stopped the other 1 worker"));
  EXPECT_THAT(run.err, HasSubstr("bad things"));
}

TEST(LaunchCli, BadFlagsExit2) {
  EXPECT_EQ(run_cli({"launch", "--nproc-per-node", "0", "--", "true"}).exit_code, 2);
  EXPECT_EQ(run_cli({"launch", "--no-such-flag", "--", "true"}).exit_code, 2);
  EXPECT_EQ(run_cli({"launch"}).exit_code, 2) << "a command is required";
  CliRun multi_node = run_cli({"launch", "--nnodes", "2", "--", "true"});
  EXPECT_EQ(multi_node.exit_code, 2);
  EXPECT_THAT(multi_node.err, HasSubstr("master_port"));
}

TEST(LaunchCli, HelpShowsAnExample) {
  CliRun run = run_cli({"launch", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_THAT(run.out, HasSubstr("bagua launch --nproc-per-node 4 -- "));
}

TEST(LaunchCli, SigtermStopsTheWorkersAndExits130) {
  TempDir dir;
  std::string script = "echo $$ > \"" + (dir / "pid.tmp.") + "$RANK\"; mv \"" + (dir / "pid.tmp.") +
                       "$RANK\" \"" + (dir / "pid.") + "$RANK\"; exec sleep 60";
  pid_t launcher = start_cli({"launch", "--nproc-per-node", "2", "--", "sh", "-c", script}, dir / "out",
                             dir / "err");
  std::vector<pid_t> pids = wait_for_pids(dir, 2);
  ASSERT_EQ(pids.size(), 2u) << read_file(dir / "err");
  for (pid_t pid : pids) ASSERT_EQ(::kill(pid, 0), 0) << "worker should be running";
  ::kill(launcher, SIGTERM);
  EXPECT_EQ(wait_exit_code(launcher), 130);
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << "worker " << pid << " outlived the launcher";
  EXPECT_THAT(read_file(dir / "err"), HasSubstr("interrupted by SIGTERM"));
}

}  // namespace
