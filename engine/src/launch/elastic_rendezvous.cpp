// The rounds of an elastic job (launch/elastic_rendezvous.h).
#include "launch/elastic_rendezvous.h"

#include "common/unique_fd.h"

#include <bagua/system.h>

#include <nlohmann/json.hpp>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

namespace bagua::launch {

namespace {
using Clock = std::chrono::steady_clock;
constexpr const char* kPrefix = "bagua-elastic/";

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

long whole_seconds(Clock::duration d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

std::string ordinal(int64_t n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) suffix = n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return std::to_string(n) + suffix;
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
}  // namespace

std::string RoundMembership::shown(size_t rank) const {
  const bool repeated = std::count(nodes.begin(), nodes.end(), nodes[rank]) > 1;
  return repeated && rank < ids.size() ? ids[rank] : nodes[rank];
}

std::string RoundMembership::shown_id(const std::string& id) const {
  for (size_t i = 0; i < ids.size() && i < nodes.size(); ++i) {
    if (ids[i] == id) return shown(i);
  }
  return id;
}

ElasticRendezvous::ElasticRendezvous(comm::StorePtr store, ElasticOptions options,
                                     std::function<void(const std::string&)> say)
    : store_(std::move(store)), options_(std::move(options)), say_(std::move(say)) {}

std::string ElasticRendezvous::key(int round, const std::string& name) const {
  return std::string(kPrefix) + "round-" + std::to_string(round) + "/" + name;
}

int64_t ElasticRendezvous::counter(const std::string& k, int64_t add) { return store_->add(k, add); }

std::optional<std::string> ElasticRendezvous::value(const std::string& k) {
  if (!store_->check({k})) return std::nullopt;
  const auto v = store_->get(k);
  return std::string(v.begin(), v.end());
}

void ElasticRendezvous::check_ended() {
  if (auto how = value(std::string(kPrefix) + "ended")) {
    const bool ok = !how->empty() && (*how)[0] == '+';
    JobEnded e("the job has ended (" + how->substr(1) + ") before this node could join it");
    e.succeeded = ok;
    throw e;
  }
}

// The job's workers per node are those of its first node: a node that runs
// another number is refused here, before it is counted in any round, so the
// job goes on without it (once it ended every node alike).
void ElasticRendezvous::check_workers_per_node() {
  const std::string mine = std::to_string(options_.nproc_per_node);
  const auto held = store_->compareSet(std::string(kPrefix) + "nproc_per_node", {}, bytes(mine));
  const std::string job(held.begin(), held.end());
  if (job != mine) {
    throw ConfigError("this node (" + options_.node_name + ") runs " + mine + " workers, the elastic job's nodes " +
                      job + " each (distributed.nproc_per_node): it is not admitted, and the job goes on without "
                      "it; start it with --nproc-per-node " + job);
  }
}

RoundMembership ElasticRendezvous::join(int from, bool returning) {
  const auto& o = options_;
  const nlohmann::json me = {{"name", o.node_name},
                             {"id", o.node_id.empty() ? o.node_name : o.node_id},
                             {"nproc_per_node", o.nproc_per_node}};
  check_workers_per_node();
  for (int round = from;; ++round, returning = false) {
    check_ended();
    // The previous round's size, when this one follows one that trained:
    // once all its nodes are back, no one else is on the way.
    std::optional<int64_t> previous_size;
    if (round > 0) {
      if (auto text = value(key(round - 1, "size"))) previous_size = std::stoll(*text);
    }
    if (returning) counter(key(round, "returned"), 1);
    const int64_t place = counter(key(round, "arrived"), 1) - 1;
    store_->set(key(round, "node-" + std::to_string(place)), bytes(me.dump()));
    say_("round " + std::to_string(round) + ": this node arrived " + ordinal(place + 1) + "; the round closes with " + std::to_string(o.max_nodes) + " nodes, or " +
         std::to_string(whole_seconds(o.last_call)) + " s after the last arrival once " +
         std::to_string(o.min_nodes) + " are here");
    const auto start = Clock::now();
    auto last_change = start;
    int64_t seen = -1;
    bool said_waiting = false;
    for (;;) {
      if (auto size_text = value(key(round, "size"))) {
        const int size = std::stoi(*size_text);
        if (place >= size) break;  // closed without this node: the next round
        RoundMembership m;
        m.round = round;
        m.node_rank = static_cast<int>(place);
        m.nnodes = size;
        std::vector<std::string> other_sizes;
        for (int i = 0; i < size; ++i) {
          // Written right after its arrival was counted: may lag a moment.
          const std::string k = key(round, "node-" + std::to_string(i));
          store_->wait({k}, o.timeout);
          const auto node = nlohmann::json::parse(*value(k));
          m.nodes.push_back(node.value("name", "?"));
          m.ids.push_back(node.value("id", m.nodes.back()));
          if (node.value("nproc_per_node", 0) != o.nproc_per_node) {
            other_sizes.push_back(m.nodes.back() + " runs " + std::to_string(node.value("nproc_per_node", 0)));
          }
        }
        if (!other_sizes.empty()) {
          throw ConfigError("the nodes of an elastic job must run as many workers each (distributed.nproc_per_node): "
                            "this node (" + o.node_name + ") runs " + std::to_string(o.nproc_per_node) + ", " +
                            list(other_sizes));
        }
        return m;
      }
      check_ended();
      if (o.interrupted) {
        if (const int signal = o.interrupted()) {
          throw JoinInterrupted("stopped by " + signal_name(signal) + " while waiting in round " +
                                    std::to_string(round) + " of the elastic job",
                                signal);
        }
      }
      const int64_t arrived = counter(key(round, "arrived"), 0);
      const auto now = Clock::now();
      if (arrived != seen) {
        seen = arrived;
        last_change = now;
      }
      const bool full = arrived >= o.max_nodes;
      const bool last_call_over = arrived >= o.min_nodes && now - last_change >= o.last_call;
      const bool all_back = arrived >= o.min_nodes && previous_size &&
                            counter(key(round, "returned"), 0) >= *previous_size &&
                            now - last_change >= std::min<Clock::duration>(o.last_call, std::chrono::seconds(1));
      if ((full || last_call_over || all_back) && counter(key(round, "closer"), 1) == 1) {
        // Elected: the size is what has arrived by now, at most MAX; a node
        // counted after this read waits for the next round.
        const int64_t size = std::min<int64_t>(counter(key(round, "arrived"), 0), o.max_nodes);
        store_->set(key(round, "size"), bytes(std::to_string(size)));
        continue;
      }
      if (arrived < o.min_nodes) {
        if (!said_waiting && now - start >= std::chrono::seconds(2)) {
          said_waiting = true;
          say_("round " + std::to_string(round) + ": " + std::to_string(arrived) + " node" +
               (arrived == 1 ? "" : "s") + " here, waiting for at least " + std::to_string(o.min_nodes) +
               " (distributed.nnodes) for up to " + std::to_string(whole_seconds(o.timeout)) +
               " s (distributed.timeout_s)");
        }
        if (now - start >= o.timeout) {
          std::vector<std::string> here;
          for (int64_t i = 0; i < arrived; ++i) {
            auto node = value(key(round, "node-" + std::to_string(i)));
            here.push_back(node ? nlohmann::json::parse(*node).value("name", "?") : "?");
          }
          throw RoundTimedOut("round " + std::to_string(round) + " of the elastic job has " + std::to_string(arrived) +
                      " node" + (arrived == 1 ? "" : "s") + " (" + list(here) + ") after " +
                      std::to_string(whole_seconds(o.timeout)) + " s, fewer than the " +
                      std::to_string(o.min_nodes) + " it needs (distributed.nnodes " + std::to_string(o.min_nodes) +
                      ":" + std::to_string(o.max_nodes) + "); " + std::to_string(o.min_nodes - arrived) +
                      " more must join at the same master_addr:master_port (distributed.timeout_s bounds the wait)",
                      true);
        }
      }
      std::this_thread::sleep_for(o.poll);
    }
  }
}

std::optional<std::string> ElasticRendezvous::waiting_after(int round) {
  try {
    if (counter(key(round + 1, "arrived"), 0) == 0) return std::nullopt;
    std::string who = "a node";
    if (auto node = value(key(round + 1, "node-0"))) who = nlohmann::json::parse(*node).value("name", who);
    return who + " is waiting in round " + std::to_string(round + 1);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> ElasticRendezvous::newcomers_after(const RoundMembership& m) {
  std::vector<std::string> found;
  try {
    const int64_t arrived = counter(key(m.round + 1, "arrived"), 0);
    for (int64_t i = 0; i < arrived; ++i) {
      auto node = value(key(m.round + 1, "node-" + std::to_string(i)));
      if (!node) continue;
      const auto j = nlohmann::json::parse(*node);
      const std::string name = j.value("name", ""), id = j.value("id", name);
      if (std::find(m.ids.begin(), m.ids.end(), id) == m.ids.end()) found.push_back(name);
    }
  } catch (const std::exception&) {
  }
  return found;
}

int ElasticRendezvous::failures(int round) {
  const int64_t all = counter(std::string(kPrefix) + "failures", 0);
  return static_cast<int>(all - (counter(key(round, "failure-counted"), 0) > 0 ? 1 : 0));
}

int ElasticRendezvous::count_failure(int round) {
  if (counter(key(round, "failure-counted"), 1) == 1) {
    return static_cast<int>(counter(std::string(kPrefix) + "failures", 1));
  }
  return static_cast<int>(counter(std::string(kPrefix) + "failures", 0));
}

void ElasticRendezvous::end(bool succeeded, const std::string& how) {
  try {
    store_->set(std::string(kPrefix) + "ended", bytes((succeeded ? "+" : "-") + how));
  } catch (const std::exception&) {
  }
}

KeepAlive::KeepAlive(std::function<comm::StorePtr()> connect, std::string id, std::chrono::milliseconds period,
                     std::chrono::milliseconds lapse)
    : connect_(std::move(connect)), id_(std::move(id)), period_(period), lapse_(lapse) {
  thread_ = std::thread([this] { loop(); });
}

KeepAlive::~KeepAlive() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void KeepAlive::loop() {
  comm::StorePtr store;
  const std::string alive = std::string(kPrefix) + "alive/", left = std::string(kPrefix) + "left/";
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    std::vector<std::string> ids;
    for (const auto& [id, seen] : watched_) ids.push_back(id);
    const auto began = Clock::now();
    lock.unlock();
    std::map<std::string, std::pair<int64_t, bool>> read;
    try {
      if (!store) store = connect_();
      store->add(alive + id_, 1);
      for (const auto& id : ids) read[id] = {store->add(alive + id, 0), store->check({left + id})};
    } catch (const std::exception&) {
      store.reset();  // reconnect at the next beat; the watched nodes' counts do not move meanwhile
    }
    lock.lock();
    const auto now = Clock::now();
    for (const auto& [id, value] : read) {
      auto it = watched_.find(id);
      if (it == watched_.end()) continue;
      if (value.first != it->second.count) {
        // The first read is the baseline: a count seen before is no sign of life.
        if (it->second.count >= 0) it->second.changed = now;
        it->second.count = value.first;
      }
      it->second.left = it->second.left || value.second;
    }
    read_began_ = began;
    wake_.notify_all();
    wake_.wait_for(lock, period_, [this] { return stop_; });
  }
  lock.unlock();
  // Every way out of the agent passes here: its peers need not wait out the
  // lapse. Only on a connection that works: a store that is gone (the job
  // over, its server's agent exited) is not waited for again.
  try {
    if (store) store->set(left + id_, bytes("1"));
  } catch (const std::exception&) {
  }
}

void KeepAlive::watch(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, Seen> next;
  const auto now = Clock::now();
  for (const auto& id : ids) {
    if (id == id_) continue;
    auto it = watched_.find(id);
    if (it != watched_.end()) {
      next[id] = it->second;
    } else {
      next[id].changed = now;  // counted as alive when first watched
    }
  }
  watched_ = std::move(next);
}

bool KeepAlive::lapsed_locked(const Seen& s, Clock::time_point now) const {
  return s.left || now - s.changed >= lapse_;
}

std::vector<std::string> KeepAlive::lapsed() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  const auto now = Clock::now();
  for (const auto& [id, seen] : watched_) {
    if (lapsed_locked(seen, now)) out.push_back(id);
  }
  return out;
}

std::vector<std::string> KeepAlive::settle(Clock::time_point since) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::max(Clock::now(), since) + lapse_ + 2 * period_;
  // The baseline: the counts of the first read that began after `since`. A
  // change seen later is a beat made after it; a change seen merely later
  // than `since` may be a beat a node made just before it died.
  wake_.wait_until(lock, deadline, [&] { return stop_ || read_began_ >= since; });
  std::map<std::string, int64_t> baseline;
  for (const auto& [id, seen] : watched_) baseline[id] = seen.count;
  for (;;) {
    const auto now = Clock::now();
    std::vector<std::string> gone;
    bool known = true;
    for (const auto& [id, seen] : watched_) {
      if (lapsed_locked(seen, now)) gone.push_back(id);
      else if (seen.count == baseline[id]) known = false;
    }
    if (known || now >= deadline) return gone;
    wake_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
}

void register_agent(const comm::StorePtr& store, const std::string& id) {
  const int64_t n = store->add(std::string(kPrefix) + "agents", 1);
  store->set(std::string(kPrefix) + "agent-" + std::to_string(n - 1), bytes(id));
}

std::vector<std::string> registered_agents(const comm::StorePtr& store) {
  std::vector<std::string> ids;
  const int64_t n = store->add(std::string(kPrefix) + "agents", 0);
  for (int64_t i = 0; i < n; ++i) {
    const std::string k = std::string(kPrefix) + "agent-" + std::to_string(i);
    if (!store->check({k})) continue;  // counted, not yet written
    const auto v = store->get(k);
    ids.emplace_back(v.begin(), v.end());
  }
  return ids;
}

bool elastic_job_ended(const comm::StorePtr& store) {
  try {
    return store->check({std::string(kPrefix) + "ended"});
  } catch (const std::exception&) {
    return false;
  }
}

bool is_local_address(const std::string& addr) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(addr.c_str(), "0", &hints, &found) != 0) return false;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, &::freeaddrinfo);
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    // Binding to an address succeeds only where it is this machine's.
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.valid() && ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) return true;
  }
  return false;
}

}  // namespace bagua::launch
