// The rounds of an elastic job (launch/elastic_rendezvous.h), on a real
// TCPStore, the agents being threads here.
#include "launch/elastic_rendezvous.h"

#include "comm/c10d_compat.h"

#include <bagua/launch.h>

#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

namespace {

using namespace std::chrono_literals;
using bagua::launch::ElasticOptions;
using bagua::launch::ElasticRendezvous;
using bagua::launch::RoundMembership;

class ElasticRounds : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<bagua::RendezvousServer>("127.0.0.1", 0);
    port_ = server_->port();
  }
  // One agent: its own client of the store.
  std::unique_ptr<ElasticRendezvous> agent(const std::string& name, int min, int max, int nproc = 2,
                                           std::chrono::milliseconds last_call = 1500ms,
                                           std::chrono::milliseconds timeout = 20s, const std::string& id = "") {
    ElasticOptions o;
    o.node_id = id;
    o.min_nodes = min;
    o.max_nodes = max;
    o.last_call = last_call;
    o.timeout = timeout;
    o.node_name = name;
    o.nproc_per_node = nproc;
    o.poll = 20ms;
    auto client = bagua::comm::make_tcp_store("127.0.0.1", port_, false, 1, 5s);
    return std::make_unique<ElasticRendezvous>(client, o, [](const std::string&) {});
  }
  std::unique_ptr<bagua::RendezvousServer> server_;
  int port_ = 0;
};

// MAX nodes close a round at once; ranks follow arrival order; a fourth
// node, arriving after the round closed, waits in the next one, which the
// three see, and once they are all back it closes without the last call.
TEST_F(ElasticRounds, MaxNodesCloseARoundAndALaterNodeWaitsInTheNext) {
  std::vector<std::unique_ptr<ElasticRendezvous>> agents;
  for (int i = 0; i < 4; ++i) agents.push_back(agent("n" + std::to_string(i), 2, 3, 2, 30s));
  std::vector<std::future<RoundMembership>> first;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    first.push_back(std::async(std::launch::async, [&, i] { return agents[i]->join(0, false); }));
    std::this_thread::sleep_for(100ms);  // arrival order n0, n1, n2
  }
  std::set<int> ranks;
  std::vector<RoundMembership> round0;
  for (int i = 0; i < 3; ++i) {
    const RoundMembership m = round0.emplace_back(first[i].get());
    EXPECT_EQ(m.round, 0);
    EXPECT_EQ(m.nnodes, 3);
    EXPECT_EQ(m.node_rank, i) << "ranks in order of arrival";
    EXPECT_EQ(m.nodes, (std::vector<std::string>{"n0", "n1", "n2"}));
    ranks.insert(m.node_rank);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "MAX arrived: no last call (30 s) waited out";
  EXPECT_FALSE(agents[0]->waiting_after(0));
  auto late = std::async(std::launch::async, [&] { return agents[3]->join(0, false); });
  std::optional<std::string> waiting;
  for (int i = 0; i < 200 && !waiting; ++i) {
    waiting = agents[1]->waiting_after(0);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(waiting);
  EXPECT_EQ(*waiting, "n3 is waiting in round 1");
  EXPECT_EQ(agents[1]->newcomers_after(round0[1]), (std::vector<std::string>{"n3"})) << "a join";
  // The three come back (as after a stop for the join): round 1 has 4 > MAX
  // arrivals; 3 train, in arrival order, and the last to come waits on.
  std::vector<std::future<RoundMembership>> second;
  for (int i = 0; i < 3; ++i) {
    second.push_back(std::async(std::launch::async, [&, i] { return agents[i]->join(1, true); }));
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(agents[1]->newcomers_after(round0[1]), (std::vector<std::string>{"n3"})) << "members coming back are none";
  ASSERT_EQ(late.wait_for(10s), std::future_status::ready);
  const RoundMembership m3 = late.get();
  EXPECT_EQ(m3.round, 1);
  EXPECT_EQ(m3.nnodes, 3);
  EXPECT_EQ(m3.node_rank, 0) << "n3 arrived first in round 1";
  const RoundMembership m0 = second[0].get(), m1 = second[1].get();
  EXPECT_EQ(m0.round, 1);
  EXPECT_EQ(m0.node_rank, 1);
  EXPECT_EQ(m1.node_rank, 2);
  // n2 came fourth: it waits in round 2 until the job ends.
  EXPECT_EQ(second[2].wait_for(300ms), std::future_status::timeout);
  agents[0]->end(true, "finished in round 1");
  EXPECT_THROW(second[2].get(), bagua::launch::JobEnded);
}

// At least MIN nodes close a round once no one arrived for the last call;
// a round whose previous round's nodes are all back closes at once.
TEST_F(ElasticRounds, MinNodesCloseAfterTheLastCallAndReturningNodesAtOnce) {
  auto a = agent("a", 2, 3, 2, 1500ms), b = agent("b", 2, 3, 2, 1500ms);
  const auto start = std::chrono::steady_clock::now();
  auto fa = std::async(std::launch::async, [&] { return a->join(0, false); });
  auto fb = std::async(std::launch::async, [&] { return b->join(0, false); });
  const RoundMembership ma = fa.get(), mb = fb.get();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(ma.nnodes, 2);
  EXPECT_EQ(ma.node_rank + mb.node_rank, 1);
  EXPECT_GE(waited, 1400ms) << "the last call was waited out";
  // Both come back: round 1 closes within about a second, not the last call.
  auto a2 = agent("a", 2, 3, 2, 30s), b2 = agent("b", 2, 3, 2, 30s);
  const auto again = std::chrono::steady_clock::now();
  auto ga = std::async(std::launch::async, [&] { return a2->join(1, true); });
  auto gb = std::async(std::launch::async, [&] { return b2->join(1, true); });
  EXPECT_EQ(ga.get().nnodes, 2);
  EXPECT_EQ(gb.get().round, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - again, 10s);
}

// Below MIN the round fails after the timeout naming who came; a node with
// another worker count is refused on arrival; a node that comes after the job
// ended is told so.
TEST_F(ElasticRounds, BelowMinTimesOutNamingTheNodesMismatchedWorkersAndEndedJobsAreSaid) {
  auto lone = agent("lone", 2, 2, 2, 100ms, 1s);
  try {
    lone->join(0, false);
    ADD_FAILURE() << "joined alone";
  } catch (const bagua::Error& e) {
    EXPECT_NE(std::string(e.what()).find("round 0 of the elastic job has 1 node (lone) after 1 s, fewer than the 2 it "
                                         "needs (distributed.nnodes 2:2); 1 more must join"),
              std::string::npos)
        << e.what();
  }
  // A node with another worker count is refused on arrival, alone, before
  // it is counted (issue 43, item 4: it once ended the job on every node).
  auto two = agent("two", 2, 2, 2), four = agent("four", 2, 2, 4), other = agent("other", 2, 2, 2);
  try {
    four->join(1, false);
    ADD_FAILURE() << "a node of another size was admitted";
  } catch (const bagua::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("this node (four) runs 4 workers, the elastic job's nodes 2 each "
                                         "(distributed.nproc_per_node): it is not admitted"),
              std::string::npos)
        << e.what();
  }
  auto f2 = std::async(std::launch::async, [&] { return two->join(1, false); });
  auto fo = std::async(std::launch::async, [&] { return other->join(1, false); });
  const bagua::launch::RoundMembership m = f2.get();
  fo.get();
  EXPECT_EQ(m.nnodes, 2);
  EXPECT_EQ(std::count(m.nodes.begin(), m.nodes.end(), "four"), 0) << "the refused node is no member";
  two->end(true, "finished in round 1");
  auto after = agent("after", 1, 2);
  try {
    after->join(0, false);
    ADD_FAILURE() << "joined an ended job";
  } catch (const bagua::launch::JobEnded& e) {
    EXPECT_TRUE(e.succeeded);
    EXPECT_NE(std::string(e.what()).find("the job has ended (finished in round 1)"), std::string::npos) << e.what();
  }
}

// Agents that share a host name are told apart by their node ids: both
// train in round 0 (named alike, ids distinct), and a third of that name
// waiting in round 1 is a newcomer, not a member coming back.
TEST_F(ElasticRounds, AgentsSharingAHostNameAreDistinctNodes) {
  std::vector<std::unique_ptr<ElasticRendezvous>> agents;
  for (int i = 0; i < 3; ++i) agents.push_back(agent("shared", 2, 3, 2, 300ms, 20s, "shared#" + std::to_string(i)));
  auto a = std::async(std::launch::async, [&] { return agents[0]->join(0, false); });
  auto b = std::async(std::launch::async, [&] { return agents[1]->join(0, false); });
  const RoundMembership m = a.get();
  b.get();
  EXPECT_EQ(m.nnodes, 2);
  EXPECT_EQ(m.nodes, (std::vector<std::string>{"shared", "shared"}));
  EXPECT_EQ(std::set<std::string>(m.ids.begin(), m.ids.end()), (std::set<std::string>{"shared#0", "shared#1"}));
  auto late = std::async(std::launch::async, [&] { return agents[2]->join(0, false); });
  std::vector<std::string> newcomers;
  for (int i = 0; i < 200 && newcomers.empty(); ++i) {
    newcomers = agents[0]->newcomers_after(m);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(newcomers, std::vector<std::string>{"shared"});
  auto back0 = std::async(std::launch::async, [&] { return agents[0]->join(1, true); });
  auto back1 = std::async(std::launch::async, [&] { return agents[1]->join(1, true); });
  EXPECT_EQ(late.get().nnodes, 3);
  back0.get();
  back1.get();
}

// A failed round is counted once for the job, however many nodes count it;
// a node asking after it was counted still sees the restarts spent before it.
TEST_F(ElasticRounds, AFailedRoundIsCountedOnceForTheJob) {
  auto a = agent("a", 1, 2), b = agent("b", 1, 2);
  EXPECT_EQ(a->failures(0), 0);
  EXPECT_EQ(a->count_failure(0), 1);
  EXPECT_EQ(b->failures(0), 0) << "round 0's own failure is not among those before it";
  EXPECT_EQ(b->count_failure(0), 1) << "counted once";
  EXPECT_EQ(b->failures(1), 1);
  EXPECT_EQ(b->count_failure(1), 2);
  EXPECT_EQ(a->failures(2), 2);
}

// Liveness: a watched node that beats is alive; one that never beats
// lapses after the lapse, and one that left (its KeepAlive destroyed, as
// on every way out of an agent) is lapsed at its peer's next look.
TEST_F(ElasticRounds, AKeepAliveThatStopsOrLeavesLapses) {
  using bagua::launch::KeepAlive;
  auto connect = [this] { return bagua::comm::make_tcp_store("127.0.0.1", port_, false, 1, 5s); };
  KeepAlive watcher(connect, "w#1", 100ms, 800ms);
  auto beating = std::make_unique<KeepAlive>(connect, "b#1", 100ms, 800ms);
  watcher.watch({"w#1", "b#1", "ghost#1"});
  EXPECT_TRUE(watcher.lapsed().empty()) << "every watched node counts as alive when first watched";
  const auto since = KeepAlive::Clock::now();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(watcher.settle(since), std::vector<std::string>{"ghost#1"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_EQ(watcher.lapsed(), std::vector<std::string>{"ghost#1"}) << "the beating one is alive";
  watcher.watch({"b#1"});
  EXPECT_TRUE(watcher.lapsed().empty());
  beating.reset();  // leaves
  std::vector<std::string> gone;
  for (int i = 0; i < 50 && gone.empty(); ++i) {
    gone = watcher.lapsed();
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(gone, std::vector<std::string>{"b#1"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s) << "a node that left is not waited out";
}

}  // namespace
