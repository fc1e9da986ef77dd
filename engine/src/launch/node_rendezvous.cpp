// The two rendezvous of the run agent (launch/node_rendezvous.h).
#include "launch/node_rendezvous.h"
#include "launch/progress_monitor.h"

#include "launch/signal_relay.h"
#include "launch/test_hold.h"

#include <bagua/exit_codes.h>

#include <algorithm>
#include <csignal>

namespace bagua::launch {
namespace {

class FixedRendezvous : public NodeRendezvous {
 public:
  explicit FixedRendezvous(const DistributedSpec& d) : nnodes_(d.nnodes), node_rank_(d.node_rank) {}
  bool elastic() const override { return false; }
  Next next_round(int from, bool /*returning*/) override {
    RoundMembership m;
    m.round = from;
    m.nnodes = nnodes_;
    m.node_rank = node_rank_;
    return {m, kExitOk};
  }
  std::function<std::optional<std::string>()> stop_when(int /*round*/) override { return nullptr; }
  std::vector<std::string> newcomers_after(const RoundMembership& /*m*/) override { return {}; }
  std::vector<std::string> lost_after(const RoundMembership& /*m*/,
                                      std::chrono::steady_clock::time_point /*since*/) override {
    return {};
  }
  int failures(int /*round*/) override { return failures_; }
  int count_failure(int /*round*/) override { return ++failures_; }
  void end(bool /*succeeded*/, const std::string& /*how*/) override {}

 private:
  int nnodes_, node_rank_;
  int failures_ = 0;
};

class ElasticNodeRendezvous : public NodeRendezvous {
 public:
  ElasticNodeRendezvous(const DistributedSpec& d, int master_port, const std::string& node_name,
                        const std::string& node_id, Say say)
      : d_(d), master_port_(master_port), node_name_(node_name), node_id_(node_id), say_(std::move(say)) {}
  bool elastic() const override { return true; }

  Next next_round(int from, bool returning) override {
    if (!rendezvous_) {
      if (auto exit_code = connect()) return {std::nullopt, *exit_code};
    }
    try {
      // While joining, a signal for this node ends its part. The relay is
      // the run agent's, in force for its whole life: a signal that comes
      // after join()'s last look stays in it, and stops the round's workers
      // as soon as they start (it was once a relay of the join's own, and
      // such a signal was lost with it: the node trained on through SIGTERM).
      RelayInScope relay;
      relay_now_ = &*relay;
      struct Forget {
        SignalRelay*& p;
        ~Forget() { p = nullptr; }
      } forget{relay_now_};
      RoundMembership m = rendezvous_->join(from, returning);
      // The round's members are watched from now: one whose keep-alive
      // lapses stops the round (stop_when), or, when the workers failed,
      // makes the failure a membership change (lost_after).
      keep_alive_->watch(m.ids);
      members_ = m;
      hold_for_test("after-join");
      return {m, kExitOk};
    } catch (const JoinInterrupted& e) {
      const int code = e.signal == SIGINT ? kExitInterrupted : kExitPreempted;
      say_(std::string(e.what()) + "; this node leaves the job (exit " + std::to_string(code) + ")");
      return {std::nullopt, code};
    } catch (const JobEnded& e) {
      say_(e.what());
      return {std::nullopt, e.succeeded ? kExitOk : kExitWorkerFailed};
    } catch (const RoundTimedOut& e) {
      // Over for every node: marked, so a node that comes later learns it
      // and the store (bagua store) stops.
      say_(e.what());
      rendezvous_->end(false, "a round stayed below distributed.nnodes' minimum for distributed.timeout_s");
      return {std::nullopt, kExitWorkerFailed};
    } catch (const ConfigError& e) {
      say_(e.what());
      return {std::nullopt, kExitInvalidInput};
    } catch (const std::exception& e) {
      say_(comm::message_of(e));
      return {std::nullopt, kExitWorkerFailed};
    }
  }

  std::function<std::optional<std::string>()> stop_when(int round) override {
    return [this, round]() -> std::optional<std::string> {
      if (auto waiting = rendezvous_->waiting_after(round)) return waiting;
      const std::vector<std::string> gone = keep_alive_->lapsed();
      if (gone.empty()) return std::nullopt;
      return names(gone) + (gone.size() == 1 ? " has" : " have") + " left or stopped answering (no keep-alive for " +
             std::to_string(keep_alive_->lapse().count() / 1000) + " s)";
    };
  }
  std::vector<std::string> newcomers_after(const RoundMembership& m) override {
    return rendezvous_->newcomers_after(m);
  }
  std::vector<std::string> lost_after(const RoundMembership& /*m*/,
                                      std::chrono::steady_clock::time_point since) override {
    const std::vector<std::string> gone = keep_alive_->settle(since);
    std::vector<std::string> out;
    for (const auto& id : gone) out.push_back(names({id}));
    return out;
  }
  int failures(int round) override {
    try {
      return rendezvous_->failures(round);
    } catch (const std::exception&) {
      return failures_seen_;  // the store does not answer: what this node last knew
    }
  }
  int count_failure(int round) override {
    try {
      return failures_seen_ = rendezvous_->count_failure(round);
    } catch (const std::exception&) {
      return ++failures_seen_;
    }
  }
  void end(bool succeeded, const std::string& how) override { rendezvous_->end(succeeded, how); }

 private:
  // The store at master_addr; an exit code when it cannot be reached.
  std::optional<int> connect() {
    const std::string endpoint = d_.master_addr + ":" + std::to_string(master_port_);
    comm::StorePtr store;
    try {
      store = comm::make_tcp_store(d_.master_addr, master_port_, /*is_server=*/false, 1,
                                   std::chrono::seconds(d_.timeout_s));
    } catch (const std::exception& e) {
      say_("cannot reach the elastic job's store at " + endpoint + " (distributed.master_addr, master_port) within " +
           std::to_string(d_.timeout_s) + " s (distributed.timeout_s): " + comm::message_of(e));
      return kExitWorkerFailed;
    }
    // Another program on the port would otherwise be taken for the store
    // and leave this node waiting out distributed.timeout_s.
    if (!is_bagua_store(store, std::chrono::seconds(10))) {
      say_(endpoint + " (distributed.master_addr, master_port) is held by a process that is not a bagua "
           "rendezvous store; stop it, or choose another port (--master-port, or --rdzv-endpoint HOST:PORT)");
      return kExitInvalidInput;
    }
    ElasticOptions eo;
    eo.min_nodes = d_.nnodes;
    eo.max_nodes = d_.nnodes_max;
    eo.last_call = std::chrono::seconds(d_.rdzv_last_call_s);
    eo.timeout = std::chrono::seconds(d_.timeout_s);
    eo.node_name = node_name_;
    eo.node_id = node_id_;
    eo.nproc_per_node = d_.nproc_per_node;
    eo.interrupted = [this]() { return relay_now_ == nullptr ? 0 : relay_now_->take_stop(); };
    try {
      register_agent(store, node_id_);
    } catch (const std::exception& e) {
      say_("cannot register with the elastic job's store at " + endpoint + ": " + comm::message_of(e));
      return kExitWorkerFailed;
    }
    rendezvous_ = std::make_unique<ElasticRendezvous>(store, eo, say_);
    const std::string host = d_.master_addr;
    const int port = master_port_;
    keep_alive_ = std::make_unique<KeepAlive>(
        // A short timeout: the thread retries at the next beat, and the
        // agent's exit waits for one attempt at most.
        [host, port] { return comm::make_tcp_store(host, port, /*is_server=*/false, 1, std::chrono::seconds(2)); },
        node_id_);
    return std::nullopt;
  }

  // Node ids as the round line shows them (RoundMembership::shown()).
  std::string names(const std::vector<std::string>& ids) const {
    std::string out;
    for (const auto& id : ids) out += (out.empty() ? "" : ", ") + members_.shown_id(id);
    return out;
  }

  const DistributedSpec& d_;
  int master_port_;
  std::string node_name_, node_id_;
  Say say_;
  std::unique_ptr<ElasticRendezvous> rendezvous_;
  // Declared after rendezvous_: destroyed first, it marks this node as left.
  std::unique_ptr<KeepAlive> keep_alive_;
  RoundMembership members_;  // of the round joined last
  int failures_seen_ = 0;
  SignalRelay* relay_now_ = nullptr;  // while joining
};

}  // namespace

std::unique_ptr<NodeRendezvous> make_node_rendezvous(const Recipe& recipe, int master_port,
                                                     const std::string& node_name, const std::string& node_id,
                                                     Say say) {
  const DistributedSpec& d = recipe.distributed;
  if (d.elastic()) {
    return std::make_unique<ElasticNodeRendezvous>(d, master_port, node_name, node_id, std::move(say));
  }
  return std::make_unique<FixedRendezvous>(d);
}

}  // namespace bagua::launch
