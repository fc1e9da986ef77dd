// `bagua bench --link RATE`: every worker on a machine of its own, joined to
// the others by a network of RATE.
//
// One network namespace per worker ("machine"), each with a veth pair whose
// other end sits on a bridge in a switch namespace; both ends of every pair
// are rate-limited with tc's token bucket filter, so each machine sends and
// receives at RATE. Inside each namespace the interface is `eth0` with
// address 10.78.0.(rank+1)/24. Namespaces are named
// bagua-bench-<pid>-<rank> and bagua-bench-<pid>-sw.
//
// A worker enters its namespace itself (enter_namespace(), first thing in
// the process, before any socket exists), so the supervisor starts it as
// usual. Everything is removed by the destructor; namespaces left by a
// bench that was killed outright (its pid gone) are removed by the next one.
#pragma once

#include <string>
#include <vector>

namespace bagua::bench {

class EmulatedNetwork {
 public:
  // Checks (exit-2 errors, as bagua::Error with user_error set): root, `ip`
  // and `tc` on PATH, a valid tc RATE ("1gbit", "500mbit", "100mbps").
  // Then builds the network; on failure removes what it made and throws
  // naming the command that failed and its message.
  EmulatedNetwork(int workers, const std::string& rate);
  ~EmulatedNetwork();
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // The prefix workers find their namespace by: PREFIX-<local rank>.
  const std::string& prefix() const { return prefix_; }
  // Rank r's address (rank 0's serves the rendezvous).
  static std::string address(int rank);
  static constexpr const char* kInterface = "eth0";

  // In a worker: joins namespace PREFIX-<local_rank> (setns). Throws
  // bagua::Error when it cannot.
  static void enter_namespace(const std::string& prefix, int local_rank);

  // Checks a tc rate without building anything (for flag validation).
  static bool valid_rate(const std::string& rate);

 private:
  void remove();
  std::string prefix_;
  std::vector<std::string> namespaces_;
};

}  // namespace bagua::bench
