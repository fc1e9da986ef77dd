// The rounds of an elastic job (distributed.nnodes "MIN:MAX"): how the
// agents of `bagua run` meet on the store at master_addr:master_port,
// which of them train together, and when they must meet again.
//
// A round is numbered from 0. A node joins round R by adding 1 to its
// arrival counter: the value it gets back, minus one, is its place in
// arrival order, which becomes its node rank. The round closes when MAX
// nodes have arrived, or when at least MIN have and none arrived for
// distributed.rdzv_last_call_s: the first agent that sees this wins an
// election (another counter) and writes the round's size. Nodes that
// arrived within the size train; any later arrival goes on to round R+1
// and waits there, and the agents training in round R, which watch round
// R+1's counter, stop their workers at a step boundary with a checkpoint
// and join R+1 themselves. A failed round's agents join R+1 too. Below
// MIN nodes a round waits up to distributed.timeout_s and then fails,
// naming the nodes it has.
//
// The keys live under "bagua-elastic/" on the store: they never meet the
// workers' keys ("attempt-R/", R being the round, as the workers of round
// R get TORCHELASTIC_RESTART_COUNT=R).
#pragma once

#include "comm/c10d_compat.h"

#include <bagua/errors.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace bagua::launch {

struct ElasticOptions {
  int min_nodes = 1, max_nodes = 1;
  std::chrono::milliseconds last_call{10000};
  std::chrono::milliseconds timeout{300000};  // below MIN nodes
  std::string node_name;                      // this node, in messages (its host name)
  // This node in the membership: unique per agent (its host name and a
  // random suffix), so agents that share a host name (containers on the
  // host's network, two slurmd on one machine) are told apart. Empty: the name.
  std::string node_id;
  int nproc_per_node = 1;                     // every node of a round must run as many workers
  std::chrono::milliseconds poll{200};
  // Asked at every poll while joining: a signal number (SIGINT, SIGTERM,
  // SIGUSR1) that came for this node, or 0. join() then gives up.
  std::function<int()> interrupted;
};

// A round this node trains in.
struct RoundMembership {
  int round = 0;
  int node_rank = 0;
  int nnodes = 0;
  std::vector<std::string> nodes;  // node names by node rank (host names; may repeat)
  std::vector<std::string> ids;    // node ids by node rank (unique)
  // Node `rank` as lines show it: its host name, or its id where another
  // member has the same host name.
  std::string shown(size_t rank) const;
  // The member with node id `id` as shown(), or `id` itself when not a member.
  std::string shown_id(const std::string& id) const;
};

// The job ended (another agent said so) while this node waited to join.
struct JobEnded : Error {
  using Error::Error;
  bool succeeded = false;
};

// A round stayed below MIN nodes for distributed.timeout_s: the job is
// over for every node (each agent in the round times out alike).
struct RoundTimedOut : Error {
  using Error::Error;
};

// A signal came for this node while it waited to join (see
// ElasticOptions::interrupted).
struct JoinInterrupted : Error {
  JoinInterrupted(const std::string& message, int signal_number) : Error(message, true), signal(signal_number) {}
  int signal;
};

class ElasticRendezvous {
 public:
  ElasticRendezvous(comm::StorePtr store, ElasticOptions options, std::function<void(const std::string&)> say);

  // Joins round `from`, or the first open round after it; returns once a
  // round closed with this node in it. `returning`: this node trained in
  // round from-1 (once every node of that round is back, and nothing new
  // arrived for a second, the round closes without waiting out the last
  // call: only a node that failed is missing from a round's successor).
  // Throws JobEnded when the job ended meanwhile, JoinInterrupted for a
  // signal (ElasticOptions::interrupted), ConfigError when the
  // round's nodes run different numbers of workers, and Error when fewer
  // than MIN nodes came within the timeout (naming those that did).
  RoundMembership join(int from, bool returning);

  // Why the round after `round` waits (a node asks to join), or nothing.
  // Never throws: a store that does not answer is nothing to stop for.
  std::optional<std::string> waiting_after(int round);

  // The nodes waiting in the round after m's that were not in m's (by
  // node id; their names returned): a join, rather than a member coming back after a failure.
  // Never throws (nothing, when the store does not answer).
  std::vector<std::string> newcomers_after(const RoundMembership& m);

  // The job's failed rounds so far (distributed.max_restarts is spent by
  // them): one count in the store for every node, so a round is counted
  // once however each node saw it end.
  // `round`: not counting that round's own failure, if already counted.
  int failures(int round);
  // Counts round `round` as failed, once for the job however many nodes
  // ask; returns the job's count after it.
  int count_failure(int round);

  // Tells nodes still joining that the job is over (they exit with it).
  void end(bool succeeded, const std::string& how);

 private:
  std::string key(int round, const std::string& name) const;
  int64_t counter(const std::string& key, int64_t add);
  std::optional<std::string> value(const std::string& key);
  void check_ended();
  void check_workers_per_node();

  comm::StorePtr store_;
  ElasticOptions options_;
  std::function<void(const std::string&)> say_;
};

// A node's liveness on the store (issue 43: a node that died after it was
// counted stayed a member, and its peers waited out timeout_s).
//
// A thread of its own, on a store client of its own, adds 1 to
// "bagua-elastic/alive/ID" every `period`, and reads the counters of the
// nodes it is told to watch (a round's members): one whose counter has not
// moved for `lapse`, or that wrote "bagua-elastic/left/ID" (every agent
// does as it exits, whatever the way out), has lapsed. Seen from here: no
// clock is compared across machines.
class KeepAlive {
 public:
  using Clock = std::chrono::steady_clock;
  // `connect`: a new client of the job's store (called on the thread, again
  // after the store stopped answering).
  KeepAlive(std::function<comm::StorePtr()> connect, std::string id,
            std::chrono::milliseconds period = std::chrono::milliseconds(1000),
            std::chrono::milliseconds lapse = std::chrono::milliseconds(5000));
  // Marks this node as left and stops the thread.
  ~KeepAlive();
  KeepAlive(const KeepAlive&) = delete;
  KeepAlive& operator=(const KeepAlive&) = delete;

  // Watches these nodes from now (this node's own id is skipped), in place
  // of those watched before.
  void watch(const std::vector<std::string>& ids);
  // The watched nodes that lapsed (by id), at once.
  std::vector<std::string> lapsed();
  // Waits until every watched node beat after `since` or lapsed (at most
  // lapse plus two periods), and returns those that lapsed.
  std::vector<std::string> settle(Clock::time_point since);
  std::chrono::milliseconds lapse() const { return lapse_; }

 private:
  struct Seen {
    int64_t count = -1;
    Clock::time_point changed;
    bool left = false;
  };
  void loop();
  bool lapsed_locked(const Seen& s, Clock::time_point now) const;

  std::function<comm::StorePtr()> connect_;
  std::string id_;
  std::chrono::milliseconds period_, lapse_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  Clock::time_point read_began_{};  // when the thread's last completed read of the watched counts began
  std::map<std::string, Seen> watched_;
  std::thread thread_;
};

// Every agent that connects to the job's store registers its node id, so
// that the store (bagua store) knows whom to watch.
void register_agent(const comm::StorePtr& store, const std::string& id);
// The ids registered so far, in order.
std::vector<std::string> registered_agents(const comm::StorePtr& store);

// True once an elastic job on `store` has ended (ElasticRendezvous::end);
// false too when the store does not answer.
bool elastic_job_ended(const comm::StorePtr& store);

// True when `addr` (a name or a literal) is an address of this machine:
// the agent there serves the store when it can.
bool is_local_address(const std::string& addr);

}  // namespace bagua::launch
