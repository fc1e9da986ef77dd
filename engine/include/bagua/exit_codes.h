// The exit codes of the `bagua` command (docs/cli.md), which the run
// agent's restart policy (bagua/run_agent.h) and the workers share: a
// worker that exits 2 or 4 would fail the same way again, so it is not
// restarted; 130 and 75 mean the workers stopped together after a
// checkpoint (130: Ctrl-C; 75: a scheduler's SIGTERM or SIGUSR1, which a
// requeue script tests for).
#pragma once

namespace bagua {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,      // a bug or an unexpected system failure
  kExitInvalidInput = 2,  // bad flags, an invalid recipe or data, bad environment
  kExitWorkerFailed = 3,  // a worker process failed (launch, run)
  kExitDiverged = 4,      // run: the loss or a gradient became NaN or infinite (train.on_nonfinite: stop)
  kExitPreempted = 75,    // run: stopped by SIGTERM/SIGUSR1 (preemption, pod termination) after a checkpoint
  kExitInterrupted = 130, // stopped by SIGINT (run), or SIGINT/SIGTERM/SIGUSR1 (launch)
};

}  // namespace bagua
