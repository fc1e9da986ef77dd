// How worker exits and whole launches are put into words.
#include <bagua/launch.h>

#include <sstream>

namespace bagua {

std::string WorkerExit::describe() const {
  if (signaled) return "signal " + std::to_string(status) + " (" + signal_name(status) + ")";
  if (status < 0) return "an unknown exit status";
  std::string text = "exit code " + std::to_string(status);
  if (!exec_error.empty()) text += " (" + exec_error + ")";
  return text;
}

namespace {
std::string workers_word(size_t n) { return n == 1 ? "worker" : "workers"; }
}  // namespace

std::string LaunchResult::summary() const {
  std::ostringstream out;
  if (ok) {
    out << "all " << workers.size() << " " << workers_word(workers.size()) << " exited 0.";
    return out.str();
  }
  size_t stopped = 0;
  std::vector<const WorkerExit*> also_failed;
  for (const auto& w : workers) {
    if (w.stopped_by_supervisor) {
      ++stopped;
    } else if (!w.succeeded() && !(first_failure && w.local_rank == first_failure->local_rank)) {
      also_failed.push_back(&w);
    }
  }
  if (!stall.empty()) out << (first_failure ? "the likely cause: " : "") << stall << (first_failure ? ". Then " : "");
  if (first_failure && !remote_failure.empty()) out << "another node failed (" << remote_failure << "); then here ";
  if (first_failure) {
    out << "rank " << first_failure->rank << " ("
        << (node_rank >= 0 ? "node " + std::to_string(node_rank) + ", " : std::string()) << "local rank "
        << first_failure->local_rank
        << ") failed with " << first_failure->describe();
    if (stopped > 0) {
      out << "; stopped the other " << stopped << " " << workers_word(stopped);
    } else if (!interrupted) {
      out << "; no other worker was still running";
    }
    if (interrupted) out << "; the launcher was also interrupted by " << signal_name(interrupt_signal);
  } else if (interrupted) {
    out << "interrupted by " << signal_name(interrupt_signal) << "; stopped " << stopped << " "
        << workers_word(stopped);
  } else if (!stall.empty()) {
    out << "; stopped " << stopped << " " << workers_word(stopped) << " here";
  } else if (!remote_failure.empty()) {
    out << "another node failed (" << remote_failure << "); stopped the " << stopped << " "
        << workers_word(stopped) << " here";
  } else {
    out << "the launch did not succeed";
  }
  if (!also_failed.empty()) {
    out << "; also failed before they were stopped (perhaps because of it):";
    for (size_t i = 0; i < also_failed.size(); ++i) {
      out << (i ? ", rank " : " rank ") << also_failed[i]->rank << " (" << also_failed[i]->describe() << ")";
    }
  }
  out << ".";
  if (first_failure) {
    if (failure_tail.empty()) {
      out << " It printed nothing.";
    } else if (failure_echoed) {
      out << " Its output is above.";
    } else {
      out << " Last lines of its output:";
      for (const auto& line : failure_tail) out << "\n  " << line;
    }
  }
  return out.str();
}

}  // namespace bagua
