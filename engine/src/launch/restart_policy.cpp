// The run agent's restart policy (bagua/run_agent.h): pure functions of how
// a round ended, unit-tested without a process started.
#include <bagua/run_agent.h>

#include <algorithm>
#include <csignal>

namespace bagua {

AttemptDecision decide_after_attempt(const LaunchResult& result, int attempt, int max_restarts) {
  using Action = AttemptDecision::Action;
  using Reason = AttemptDecision::Reason;
  if (result.ok) return {Action::kFinish, Reason::kSucceeded, kExitOk};
  // A signal to this agent: Ctrl-C is an interruption, a scheduler's notice
  // (SIGTERM, SIGUSR1) a preemption, whatever the workers (which the agent
  // stops with SIGTERM) exit with.
  if (result.interrupted) {
    return {Action::kFinish, Reason::kInterrupted,
            result.interrupt_signal == SIGTERM || result.interrupt_signal == SIGUSR1 ? kExitPreempted
                                                                                     : kExitInterrupted};
  }
  // Workers exit 130 or 75 after stopping at an agreed step with a
  // checkpoint: a signal reached them directly or, in a multi-node run,
  // another node.
  const bool stopped_by_agreement =
      result.first_failure && !result.first_failure->signaled &&
      (result.first_failure->status == kExitInterrupted || result.first_failure->status == kExitPreempted);
  if (stopped_by_agreement) {
    // A preemption if any worker here got the scheduler's notice itself.
    const bool preempted = std::any_of(result.workers.begin(), result.workers.end(), [](const WorkerExit& w) {
      return !w.signaled && w.status == kExitPreempted;
    });
    return {Action::kFinish, Reason::kStoppedByAgreement, preempted ? kExitPreempted : kExitInterrupted};
  }
  // A worker that found bad input (2) or a diverged training (4) would
  // find it again: no restart, and its exit code is the run's.
  const int cause = result.first_failure && !result.first_failure->signaled ? result.first_failure->status : -1;
  if (cause == kExitInvalidInput || cause == kExitDiverged) return {Action::kFinish, Reason::kWouldFailAgain, cause};
  if (attempt >= max_restarts) return {Action::kFinish, Reason::kRestartsExhausted, kExitWorkerFailed};
  return {Action::kRestart, Reason::kRestartable, kExitWorkerFailed};
}

AttemptDecision decide_after_round(const LaunchResult& result, const AttemptDecision& attempt,
                                   const MembershipNews& news) {
  using Action = AttemptDecision::Action;
  using Reason = AttemptDecision::Reason;
  // A fixed-size job's membership never changes: the failure policy is all.
  if (!news.can_change) return attempt;
  // A node waits to join (LaunchOptions::stop_when): the workers stopped at
  // a step boundary with a checkpoint, however they exited.
  if (!result.stopped_for.empty() && !result.interrupted) return {Action::kRestart, Reason::kNodeWaiting, kExitOk};
  // A round that failed as a node joined (its workers, stopped as they
  // started, never reached a step and their peers lost them) is a join.
  if (attempt.failed() && !news.newcomers.empty()) return {Action::kRestart, Reason::kNodeJoined, kExitOk};
  // A round that failed as one of its nodes left or died (the survivors'
  // workers lost its workers) is a membership change too: the survivors go
  // on, whatever distributed.max_restarts (its point is --nnodes MIN:MAX).
  if (attempt.failed() && !news.lost.empty()) return {Action::kRestart, Reason::kNodeLost, kExitOk};
  // The workers stopped together at another node's request: it leaves, or
  // one joins; the others go on.
  if (attempt.reason == Reason::kStoppedByAgreement) return {Action::kRestart, Reason::kOtherNodeStopped, kExitOk};
  return attempt;
}

}  // namespace bagua
