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
//
// Asynchronous ranks read a stop at different steps, so they must also
// agree on where to stop (else each would save its own step, and one
// rank's evaluation could meet another's checkpoint collectives). Each
// vote carries (stop, away, step), reduced by MAX: a rank that reads a
// stop casts one more vote with its step and waits for it (agree()); all
// stop at S, the largest of those steps, those behind stepping on to it.
// No control collective (evaluation, checkpoint, end of run) lies between
// the ranks' steps, because a rank passes one only with every other; and
// no rank enters one while a peer may still read a stop before it:
// enter_collective() keeps voting, without stepping, until a vote says
// every rank is at the collective (away = 0 everywhere), or says stop.
#pragma once

#include <bagua/communication.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace bagua::train {

// Makes SIGINT, SIGTERM and SIGUSR1 set the flag stop_requested_here() reads.
void request_stop_on_signals();
bool stop_requested_here();
// The first of those signals this process got, or 0 (a stop that came
// through the vote from another rank, or none).
int stop_signal_here();
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

  // Asynchronous ranks, at the top of each step (`step`: steps done):
  // casts and reads votes as poll() does; returns the step S every rank
  // stops at once they agreed (then always), else nothing. A rank stops
  // when its steps done reach S.
  std::optional<int64_t> poll_async(bool stop_here, int64_t step);

  // Asynchronous ranks, before a control collective after `step` steps
  // (evaluation, checkpoint, the end): returns S when the ranks agreed to
  // stop (S == step then; the collective still runs), else nothing, once
  // every rank is there. Synchronous ranks: nothing, at once.
  std::optional<int64_t> enter_collective(bool stop_here, int64_t step);

  // Matches the ranks' vote counts (over `control`) and waits for every
  // vote in flight. Collective; call once, at the end.
  void drain(const ProcessGroupPtr& control);

  int64_t votes_cast() const { return votes_cast_; }

 private:
  struct Ballot {
    bool stop = false;
    bool anyone_away = false;
    int64_t step = 0;
  };
  void cast(bool stop, bool away = true, int64_t step = 0);
  Ballot read();
  int64_t agree(int64_t step);

  ProcessGroupPtr group_;
  bool synchronous_;
  at::Tensor flag_;  // (stop, away, step), MAX over the ranks
  Work work_;
  bool pending_ = false;
  int64_t votes_cast_ = 0;
  std::optional<int64_t> stop_at_;  // asynchronous: the agreed step
};

}  // namespace bagua::train
