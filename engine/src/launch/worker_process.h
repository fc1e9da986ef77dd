// Starting one worker: fork, put it in its own process group, wire its
// stdout/stderr to pipes, and exec its command with a prepared environment.
//
// Everything the child needs is prepared before fork(); between fork() and
// exec the child only makes async-signal-safe calls, so this is safe in a
// multithreaded process.
#pragma once

#include "common/unique_fd.h"

#include <sys/types.h>

#include <string>
#include <vector>

namespace bagua::launch {

struct WorkerPlan {
  std::vector<std::string> argv;        // argv[0] as the user wrote it
  std::vector<std::string> exec_paths;  // files to try for argv[0], in order (see exec_candidates)
  std::vector<std::string> env;         // "KEY=VALUE" entries, the whole environment
};

struct StartedWorker {
  pid_t pid = -1;       // also its process group id
  UniqueFd stdout_fd;   // read ends, non-blocking, close-on-exec
  UniqueFd stderr_fd;
  int exec_errno = 0;   // 0 when the command was executed; else why not (the child exited 126/127)
};

// Where execvp would look for `name`: itself when it contains a '/', else
// each directory of `path_value` (a PATH string; empty entries mean ".").
std::vector<std::string> exec_candidates(const std::string& name, const std::string& path_value);

// Forks and execs one worker with stdin from stdin_fd. Throws bagua::Error when
// the system refuses (pipes, fork); an exec failure is reported in exec_errno.
StartedWorker start_worker(const WorkerPlan& plan, int stdin_fd);

}  // namespace bagua::launch
