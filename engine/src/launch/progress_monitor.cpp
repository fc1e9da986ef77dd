#include "launch/progress_monitor.h"

#include "comm/c10d_compat.h"

#include <bagua/errors.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include "common/progress.h"

#include "common/unique_fd.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace bagua::launch {
namespace {

using Clock = std::chrono::steady_clock;

// A process that sends nothing for this long (its reporter sends every
// second) is frozen, stopped or gone.
constexpr std::chrono::seconds kSilentAfter{4};

// True when something accepts TCP connections at addr:port within about a
// second. Checked before c10d's client connects, which would log a warning
// for every refused attempt while node 0's store is not up.
bool accepts_connections(const std::string& addr, int port) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) continue;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) return true;
    if (errno != EINPROGRESS) continue;
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, 1000) != 1) continue;
    int error = 0;
    socklen_t length = sizeof(error);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) return true;
  }
  return false;
}

long seconds(Clock::duration d) {
  return std::lround(std::chrono::duration<double>(d).count());
}

}  // namespace

struct ProgressMonitor::Connection {
  comm::StorePtr store;
};

ProgressMonitor::ProgressMonitor(const LaunchOptions& options, int port, int world_size, const std::string& attempt)
    : options_(options), port_(port), world_size_(world_size), prefix_("attempt-" + attempt + "/") {
  thread_ = std::thread([this] { loop(); });
}

ProgressMonitor::~ProgressMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<ProgressMonitor::Stop> ProgressMonitor::take_stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!stop_ || stop_taken_) return std::nullopt;
  stop_taken_ = true;
  return stop_;
}

void ProgressMonitor::publish_failure(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_failure_ = text;
  }
  wake_.notify_all();
}

std::string ProgressMonitor::earlier_remote_failure(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + wait;
  for (;;) {
    if (my_failure_order_ > 0) {
      // Numbered 1: first. Else the earlier one is in the store already
      // (numbered before it is written: a poll or two may be needed).
      if (my_failure_order_ == 1) return "";
      if (!first_remote_failure_.empty() && first_remote_order_ < my_failure_order_) return first_remote_failure_;
    }
    if (Clock::now() >= deadline) return "";
    poll_now_ = true;
    wake_.notify_all();
    polled_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

std::map<int, int64_t> ProgressMonitor::diverged_ranks(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mutex_);
  // A poll that starts after this call: one already under way may have
  // read the store before the last report came.
  const int64_t wanted = polls_ + 2;
  const auto deadline = Clock::now() + wait;
  while (polls_ < wanted && Clock::now() < deadline && !quit_) {
    poll_now_ = true;
    wake_.notify_all();
    polled_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  std::map<int, int64_t> diverged;
  for (const auto& [rank, s] : ranks_) {
    if (s.diverged_ms > 0) diverged[rank] = s.diverged_ms;
  }
  return diverged;
}

std::optional<std::pair<int, std::string>> ProgressMonitor::silent_rank(const std::set<int>& exited) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  for (const auto& [rank, s] : ranks_) {
    if (!s.seen || exited.count(rank) || s.phase == progress::kExitedPhase) continue;
    if (now - s.last_beat >= kSilentAfter) return std::make_pair(rank, describe(rank, now));
  }
  return std::nullopt;
}

std::string ProgressMonitor::describe(int rank, Clock::time_point now) const {
  const RankState& s = ranks_.at(rank);
  std::string who = "rank " + std::to_string(rank) + " (node " + std::to_string(rank / options_.nproc_per_node) + ")";
  if (now - s.last_beat >= kSilentAfter) {
    return who + " stopped reporting progress " + std::to_string(seconds(now - s.last_beat)) +
           " s ago, at step " + std::to_string(s.step) + " in " + s.phase +
           " (a stopped, frozen or hung process)";
  }
  return who + " has been at step " + std::to_string(s.step) + " in " + s.phase + " for " +
         std::to_string(seconds(now - s.last_progress)) + " s";
}

void ProgressMonitor::say(const std::string& line) const {
  if (options_.stderr_fd < 0) return;
  const std::string text = "bagua run: " + line + "\n";
  ssize_t ignored = ::write(options_.stderr_fd, text.data(), text.size());  // one write: whole lines
  (void)ignored;
}

void ProgressMonitor::check_stalls(Clock::time_point now) {
  std::vector<int> live;
  for (const auto& [rank, s] : ranks_) {
    if (s.seen && s.phase != progress::kExitedPhase) live.push_back(rank);
  }
  if (live.empty()) return;
  if (options_.stall_timeout.count() > 0 && !stop_) {
    for (int rank : live) {
      if (now - ranks_[rank].last_beat >= options_.stall_timeout) {
        Stop stop;
        stop.stall = describe(rank, now) + "; it has sent nothing for longer than distributed.timeout_s (" +
                     std::to_string(seconds(options_.stall_timeout)) + " s), so the job is stopped";
        stop.kill.push_back(rank);
        stop_ = stop;
        return;
      }
    }
    // Reporting but not moving: a rank hung in a collective or a driver call
    // keeps its reporter thread beating. In a training step's phases, no
    // step, phase or collective started for 9/10 of the timeout stops the
    // job, before the peers' own collectives time out and blame a healthy
    // rank. The one named is the rank furthest behind (fewest steps, then
    // fewest collectives started: the one its peers wait for).
    const auto patience = options_.stall_timeout * 9 / 10;
    bool hung = false;
    for (int rank : live) {
      const RankState& s = ranks_[rank];
      hung = hung || (!progress::phase_may_take_long(s.phase) && now - s.last_progress >= patience);
    }
    if (hung) {
      auto behind = [&](int a, int b) {
        const RankState &x = ranks_[a], &y = ranks_[b];
        return x.step != y.step ? x.step < y.step : x.collectives < y.collectives;
      };
      int laggard = live.front();
      for (int rank : live) {
        if (behind(rank, laggard)) laggard = rank;
      }
      Stop stop;
      for (int rank : live) {
        if (!behind(laggard, rank) && !behind(rank, laggard)) stop.kill.push_back(rank);
      }
      const std::string why = "while it still reported (a hung collective or driver call); that is longer than 9/10 "
                              "of distributed.timeout_s (" + std::to_string(seconds(options_.stall_timeout)) +
                              " s), so the job is stopped";
      if (stop.kill.size() == 1) {
        stop.stall = describe(laggard, now) + " without starting a collective " + why;
      } else {
        std::string ranks;
        for (int rank : stop.kill) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
        stop.stall = "ranks " + ranks + " are at the same step with as many collectives started, none moving (" +
                     describe(laggard, now) + ") " + why;
      }
      stop_ = stop;
      return;
    }
  }
  if (options_.stall_warning.count() <= 0 || now - last_warning_ < options_.stall_warning) return;
  // A stall: some rank made no progress for stall_warning while the ranks
  // are not all at the same point (all evaluating together is no stall).
  bool stuck = false, apart = false;
  for (int rank : live) {
    const RankState& s = ranks_[rank];
    stuck = stuck || now - s.last_progress >= options_.stall_warning;
    apart = apart || s.step != ranks_[live.front()].step || s.phase != ranks_[live.front()].phase ||
            now - s.last_beat >= kSilentAfter;
  }
  if (!stuck || !apart) return;
  // The laggard: a silent rank first, else the one with the fewest steps.
  int laggard = live.front();
  for (int rank : live) {
    const RankState& s = ranks_[rank];
    const RankState& l = ranks_[laggard];
    const bool silent = now - s.last_beat >= kSilentAfter, l_silent = now - l.last_beat >= kSilentAfter;
    if ((silent && !l_silent) || (silent == l_silent && s.step < l.step)) laggard = rank;
  }
  std::string others;
  int shown = 0;
  for (int rank : live) {
    if (rank == laggard) continue;
    if (shown++ == 4) {
      others += ", ...";
      break;
    }
    others += (others.empty() ? "" : ", ") + std::string("rank ") + std::to_string(rank) + " at step " +
              std::to_string(ranks_[rank].step) + " in " + ranks_[rank].phase;
  }
  say("warning: no progress for " + std::to_string(seconds(options_.stall_warning)) + " s: " +
      describe(laggard, now) + (others.empty() ? "" : "; the others: " + others));
  last_warning_ = now;
}

void ProgressMonitor::poll_once(Connection& connection) {
  const std::string& file = options_.store_file;
  if (!connection.store) {
    if (!file.empty()) {
      connection.store = comm::make_prefix_store(prefix_, comm::make_file_store(file));
    } else {
      if (!accepts_connections(options_.master_addr, port_)) return;
      connection.store = comm::make_prefix_store(
          prefix_, comm::make_tcp_store(options_.master_addr, port_, false, world_size_, std::chrono::seconds(2)));
    }
  }
  const comm::StorePtr& store = connection.store;
  std::vector<std::optional<progress::Report>> reports(world_size_);
  for (int r = 0; r < world_size_; ++r) {
    if (!file.empty()) {
      reports[r] = progress::read_report_file(progress::report_file(file, prefix_, r));
      continue;
    }
    const std::string key = progress::rank_key(r);
    if (store->check({key})) reports[r] = progress::decode(store->get(key));
  }
  // Another node's failure, if any: the first published. Each is stored
  // as "ORDER TEXT", ORDER counted in the store as failures are published.
  std::string failure;
  int64_t failure_order = 0;
  for (int node = 0; node < options_.nnodes; ++node) {
    if (node == options_.node_rank || !store->check({progress::failure_key(node)})) continue;
    auto bytes = store->get(progress::failure_key(node));
    const std::string value(bytes.begin(), bytes.end());
    const size_t space = value.find(' ');
    const int64_t order = std::atoll(value.substr(0, space).c_str());
    if (failure.empty() || order < failure_order) {
      failure = "node " + std::to_string(node) + ": " + (space == std::string::npos ? value : value.substr(space + 1));
      failure_order = order;
    }
  }
  std::string mine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mine.swap(pending_failure_);
  }
  if (!mine.empty()) {
    const int64_t order = store->add(progress::kFailureOrderKey, 1);
    const std::string value = std::to_string(order) + " " + mine;
    store->set(progress::failure_key(options_.node_rank), std::vector<uint8_t>(value.begin(), value.end()));
    std::lock_guard<std::mutex> lock(mutex_);
    my_failure_order_ = order;
  }
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  for (int r = 0; r < world_size_; ++r) {
    if (!reports[r]) continue;
    RankState& s = ranks_[r];
    if (!s.seen || reports[r]->beat != s.beat) s.last_beat = now;
    if (!s.seen || reports[r]->step != s.step || reports[r]->phase != s.phase ||
        reports[r]->collectives != s.collectives) {
      s.last_progress = now;
    }
    s.seen = true;
    s.beat = reports[r]->beat;
    s.step = reports[r]->step;
    s.collectives = reports[r]->collectives;
    s.diverged_ms = reports[r]->diverged_ms;
    s.phase = reports[r]->phase;
  }
  first_remote_failure_ = failure;
  first_remote_order_ = failure_order;
  if (!failure.empty() && !stop_) {
    Stop stop;
    stop.remote_failure = failure;
    stop_ = stop;
  }
  check_stalls(now);
}

void ProgressMonitor::loop() {
  Connection connection;
  for (;;) {
    try {
      poll_once(connection);
    } catch (const std::exception&) {
      // The store is not up yet, or gone: nothing to watch until it is.
      connection.store.reset();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    ++polls_;
    polled_.notify_all();
    if (quit_) break;
    wake_.wait_for(lock, std::chrono::seconds(1), [this] { return quit_ || poll_now_ || !pending_failure_.empty(); });
    poll_now_ = false;
    if (quit_) break;
  }
  // A failure published at the very end still goes out, once.
  try {
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending = !pending_failure_.empty();
    }
    if (pending) poll_once(connection);
  } catch (const std::exception&) {
  }
}

}  // namespace bagua::launch

namespace bagua {

struct RendezvousServer::Impl {
  comm::StorePtr store;
  int port = 0;
  std::string file;  // private_file(): the store's file, in a directory removed with this
};

RendezvousServer::RendezvousServer() : impl_(std::make_unique<Impl>()) {}

std::unique_ptr<RendezvousServer> RendezvousServer::private_file() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/bagua-store.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {  // mode 0700: the run's alone
    throw ConfigError("cannot make the run's store directory " + pattern + ": " + std::strerror(errno) +
                      " (set TMPDIR to a writable directory)");
  }
  std::unique_ptr<RendezvousServer> server(new RendezvousServer());
  server->impl_->file = pattern + "/store";
  try {
    server->impl_->store = comm::make_file_store(server->impl_->file);
    server->impl_->store->set(kBaguaStoreKey, std::vector<uint8_t>{'1'});
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove_all(pattern, ignored);
    throw ConfigError("cannot make the run's store in " + pattern + ": " + e.what());
  }
  return server;
}

RendezvousServer::RendezvousServer(const std::string& addr, int port) : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) throw ConfigError("rendezvous port must be in [0, 65535], got " + std::to_string(port));
  try {
    // A short timeout: binding is retried until it passes, and a port in use must fail now.
    auto store = comm::make_tcp_store(addr, port, /*is_server=*/true, 1, std::chrono::seconds(2));
    impl_->port = static_cast<c10d::TCPStore&>(*store).getPort();
    impl_->store = store;
    // What tells bagua's clients that this is one of its stores
    // (is_bagua_store()), not another process on the port.
    store->set(kBaguaStoreKey, std::vector<uint8_t>{'1'});
  } catch (const std::exception& e) {
    throw ConfigError("cannot serve the rendezvous on port " + std::to_string(port) +
                      " (distributed.master_port; is another job using it?): " + e.what());
  }
}

bool is_bagua_store(const comm::StorePtr& store, std::chrono::seconds within) {
  try {
    // Waited for, not checked: a client may connect between the server's
    // start and its set().
    store->wait({kBaguaStoreKey}, std::chrono::duration_cast<std::chrono::milliseconds>(within));
    return true;
  } catch (const std::exception&) {
    return false;  // the key never came, or no answer a TCPStore would give
  }
}

bool launch::ProgressMonitor::still_starting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [rank, s] : ranks_) {
    if (s.seen && s.phase != "start-up") return false;
  }
  return true;
}

RendezvousServer::~RendezvousServer() {
  if (impl_->file.empty()) return;
  impl_->store.reset();
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::path(impl_->file).parent_path(), ignored);
}

int RendezvousServer::port() const { return impl_->port; }

const std::string& RendezvousServer::file() const { return impl_->file; }

}  // namespace bagua
