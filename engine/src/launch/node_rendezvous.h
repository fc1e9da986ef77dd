// Who trains in the run agent's next round (torch's RendezvousHandler, as
// its SimpleElasticAgent uses one): the agent's one loop (run_agent.cpp)
// asks it before each round and knows nothing of how the nodes meet.
//
//   FixedRendezvous    a fixed-size job: the membership never changes, so
//                      every round is the recipe's nnodes and node_rank
//                      (the rounds are the restarts after failures);
//   ElasticNodeRendezvous  an elastic job (distributed.nnodes "MIN:MAX"):
//                      the rounds of ElasticRendezvous on the store at
//                      master_addr (launch/elastic_rendezvous.h).
#pragma once

#include "launch/elastic_rendezvous.h"

#include <bagua/recipe.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bagua::launch {

using Say = std::function<void(const std::string&)>;

class NodeRendezvous {
 public:
  virtual ~NodeRendezvous() = default;

  // Members can come and go between rounds.
  virtual bool elastic() const = 0;

  // The round this node trains in next: round `from` or a later one;
  // `returning`: this node trained in round from-1. None when this node
  // must stop instead (the job ended, a signal came while it waited, the
  // rendezvous failed): it has said why, and `exit_code` is the run's.
  struct Next {
    std::optional<RoundMembership> round;
    int exit_code = 0;
  };
  virtual Next next_round(int from, bool returning) = 0;

  // For LaunchOptions::stop_when while round `round` runs: a reason to stop
  // its workers (a node waits to join). Null: never asked.
  virtual std::function<std::optional<std::string>()> stop_when(int round) = 0;

  // The nodes waiting for the round after m's that were not in m's.
  virtual std::vector<std::string> newcomers_after(const RoundMembership& m) = 0;

  // The nodes of m's round (this one aside) that are gone: their keep-alive
  // lapsed, or they left. Waits until that is known of each (a beat after
  // `since`, or the lapse), a few seconds at most. Fixed jobs: none.
  virtual std::vector<std::string> lost_after(const RoundMembership& m,
                                              std::chrono::steady_clock::time_point since) = 0;

  // The job's failed rounds before round `round` (distributed.max_restarts
  // is spent by them), and counting `round` as one (once for the job, however
  // many nodes count it); count_failure returns the count after it.
  virtual int failures(int round) = 0;
  virtual int count_failure(int round) = 0;

  // The job is over for every node (those still joining learn it).
  virtual void end(bool succeeded, const std::string& how) = 0;
};

// recipe.distributed decides which; `master_port` is the store's port;
// `node_name` this node in messages (its host name), `node_id` in the
// membership (unique per agent).
std::unique_ptr<NodeRendezvous> make_node_rendezvous(const Recipe& recipe, int master_port,
                                                     const std::string& node_name, const std::string& node_id,
                                                     Say say);

}  // namespace bagua::launch
