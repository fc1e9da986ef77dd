// The workers' agreement to stop (SIGINT/SIGTERM on any of them): every rank
// stops at the same step boundary, so a signal seen by some ranks only
// never leaves the others waiting in a collective.
//
// Each step every rank casts a vote (one-value allreduce, MAX, on a group
// of its own) and reads the answer to the vote it cast one step before, so
// the allreduce never waits on the critical path; every rank reads the same
// answer at the same step. Asynchronous algorithms (ranks at their own
// pace) must not wait for the slowest rank: there a vote is read only once
// every rank has cast it (polled, never waited for), and the next one is
// cast only then, so the ranks' votes stay matched one for one; drain()
// closes the last ones (a rank may be one vote ahead).
//
// The signal handlers only set a flag (request_stop_on_signals()); the
// vote carries it to every rank.
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace bagua::train {

// Makes SIGINT and SIGTERM set the flag stop_requested_here() reads.
void request_stop_on_signals();
bool stop_requested_here();
// Sets or clears the flag (tests).
void set_stop_requested_here(bool stop);

class StopVote {
 public:
  // `group`: used for the votes alone (a duplicate of the default group).
  // `synchronous`: ranks step in lockstep (else votes are polled).
  StopVote(ProcessGroupPtr group, bool synchronous);

  // Casts this step's vote (`stop_here`) and returns whether any rank
  // asked to stop in the vote read now (the previous step's, or, when
  // asynchronous, the latest one every rank has cast). Collective.
  bool poll(bool stop_here);

  // Matches the ranks' vote counts (over `control`) and waits for every
  // vote in flight. Collective; call once, at the end.
  void drain(const ProcessGroupPtr& control);

  int64_t votes_cast() const { return votes_cast_; }

 private:
  void cast(bool stop);

  ProcessGroupPtr group_;
  bool synchronous_;
  at::Tensor flag_;
  Work work_;
  bool pending_ = false;
  int64_t votes_cast_ = 0;
};

}  // namespace bagua::train
