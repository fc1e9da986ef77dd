// `bagua bench`: its agent (launch the workers, emulate the network, turn
// their figures into a summary), what each worker process runs, and the
// summary's table and chart.
//
// run_bench()'s contract is below, with its options. run_bench_worker() joins the process group (torchrun's variables must be
// set), builds the model (a recipe's TorchScript model, or a synthetic MLP
// of about `params` parameters made in memory) and, per contender, a clone
// of it with its own optimizers and, for the algorithms, its own
// BaguaModule. The contenders are "local" (the same step without any
// communication: the compute reference) and each named algorithm. Every
// contender first takes `warmup` unmeasured steps; then `rounds` rounds
// follow, each running every contender for `steps` steps in turn (the order
// reversed on odd rounds), so slow drifts of the machine hit all alike.
// Between its rounds an algorithm's background work (async) is paused.
//
// Per contender and rank it records every measured step's seconds, the
// bytes the communication layer counted (ProcessGroup::bytes_sent()), the
// bytes this process's TCP sockets sent and received (the kernel's
// TCP_INFO counters: what really crossed the wire, store and control
// traffic included), and the losses. Rank 0 gathers every rank's figures
// and returns them as JSON (see docs/bench.md for the fields); the other
// ranks return null.
//
// With straggler_rank set, that rank sleeps (straggler_factor - 1) times its
// own median local step time inside every step (between forward and
// backward), as if its compute were that much slower.
#pragma once

#include <bagua/recipe.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bagua {

struct BenchSpec {
  // A recipe (model, data, optimizers, batch size, algorithm kwargs), with
  // `overrides` ("key=value") applied; empty: the synthetic model.
  std::string recipe;
  std::vector<std::string> overrides;
  // Algorithms to measure, registry names, in order.
  std::vector<std::string> algorithms;
  int64_t steps = 10;   // measured steps per contender and round
  int64_t warmup = 5;   // unmeasured steps per contender before the rounds
  int64_t rounds = 3;
  // Synthetic model only: about this many parameters, batch per worker.
  int64_t params = 10'000'000;
  int64_t batch_size = 32;
  int straggler_rank = -1;
  double straggler_factor = 1.0;
  // Rank 0 writes a progress line per contender and round to stderr; with
  // progress_tty, a bar redrawn in place on /dev/tty instead.
  bool progress_tty = false;

  nlohmann::json to_json() const;
  static BenchSpec from_json(const nlohmann::json& j);
};

// Runs the benchmark as one worker; rank 0 returns every rank's figures.
// Throws bagua::Error (an InvalidArgument-style message) for a spec or
// recipe it cannot run, CommError when a peer fails.
nlohmann::json run_bench_worker(const BenchSpec& spec);

// "25M", "1.5m", "300k", "2G", "12345": a count (powers of 1000). Throws
// InvalidArgument for anything else or for values outside [1, 1e11].
int64_t parse_count(const std::string& text);

// Bytes this process's TCP sockets have sent (acknowledged by the peer) and
// received so far, summed over its open sockets (Linux TCP_INFO). Sockets
// closed meanwhile drop out, so take differences over windows in which the
// connections stay open.
struct WireBytes {
  int64_t sent = 0;
  int64_t received = 0;
};
WireBytes tcp_bytes_of_this_process();

// ---------------------------------------------------------------- the agent

struct BenchOptions {
  // What the workers measure; its straggler fields are set from `straggler`.
  // spec.recipe names the recipe file (absolute) when `recipe` is set.
  BenchSpec spec;
  // The recipe (overrides applied), whose distributed and train.threads
  // keys are the defaults below; none: the synthetic model.
  std::optional<Recipe> recipe;
  // The recipe as the command line named it (the report's "recipe"), and
  // the synthetic model's size as it gave it ("25M"): for what is said.
  std::string recipe_arg, params_arg;
  // Unset: the recipe's, else 2 workers, 1 node, node 0, 127.0.0.1, and a
  // free port on one node (29500 on several).
  std::optional<int> nproc_per_node, nnodes, node_rank, master_port;
  std::optional<std::string> master_addr;
  // "RANK:FACTOR" (make RANK's compute FACTOR times slower), or empty.
  std::string straggler;
  // A tc rate ("1gbit"): every worker on an emulated machine of its own
  // (bench/emulated_network.h; root, ip and tc), one node only. Empty: none.
  std::string link;
  // argv of a worker before "--worker-spec FILE --worker-result FILE":
  // this program's `bench` command, whose worker mode is
  // run_bench_worker_files().
  std::vector<std::string> worker_command;
  // Rank 0's stderr is a terminal (a progress bar instead of lines).
  bool progress_tty = false;
  // Where the agent's lines go (default: stderr, "bagua bench: " first).
  std::function<void(const std::string&)> say;
};

struct BenchOutcome {
  int exit_code = 0;  // bagua/exit_codes.h: 0, 2 (a worker found bad input), 3, 130
  // summarize_bench()'s report when it succeeded on node 0; null otherwise.
  nlohmann::json report;
};

// Checks the options (a problem is said, naming the flag, and returns
// exit code 2 before anything starts), and the recipe as `bagua run` does
// (check_supported, check_data: their errors are thrown); builds the
// emulated network (--link: its user errors), starts the workers with
// LocalSupervisor, waits for them, and summarises rank 0's figures (with
// the link, the straggler and the recipe added). A worker's failure or an
// interrupt is an outcome, not an exception.
BenchOutcome run_bench(BenchOptions options);

// A worker of run_bench(): enters its emulated machine when the agent made
// any, runs run_bench_worker() on the spec in `spec_file`, and rank 0
// writes the figures to `result_file`.
void run_bench_worker_files(const std::string& spec_file, const std::string& result_file);

}  // namespace bagua

namespace bagua::bench {

// The algorithm every other is compared with: always measured, added by
// run_bench() when --algorithm does not name it.
inline constexpr const char* kBaseline = "gradient_allreduce";

// ---------------------------------------------------------------- the summary
//
// Definitions (docs/bench.md):
//   step_time_s       the slowest rank's median seconds per step
//   samples_per_s     the sum over ranks of batch * steps / seconds measured
//   compute_s         the slowest rank's median step without communication
//                     (the "local" contender)
//   communication_s   step_time_s - compute_s (never below 0): the time the
//                     algorithm adds to a step, what overlap did not hide
//   bytes             per worker and step: the communication layer's count
//                     and the TCP bytes sent and received (mean over ranks)
//   loss              first: the first warm-up step's; last: the mean over
//                     the last round's steps (both the mean over ranks)
//   diverged          the last loss is not finite or above 1.5x the first
//   ideal_step_s      when gradient_allreduce was measured: compute_s plus
//                     gradient_allreduce's communication_s scaled by this
//                     algorithm's counted bytes over its (the step if
//                     compression and the rest of its extra work were free);
//                     vs_ideal is step_time_s over it

// raw: run_bench_worker()'s JSON (with "baseline_added" when run_bench()
// added the baseline). Returns it with "summary" (one object per contender,
// "local" first), "verdict" (bench_verdict()'s, its baseline_added set) and
// "recommendation" (the verdict's line) added.
nlohmann::json summarize_bench(nlohmann::json raw);

// The verdict between the algorithms of a summary (summarize_bench()'s
// "summary" array), as JSON:
//   candidates      the algorithms that train as well as the baseline: not
//                   diverged, a last loss at most 5% (+0.001) above its, and
//                   figures from every round (async's interval can outlast one)
//   not_considered  [{name, reason}] for the others
//   kind            "clear"        the fastest candidate (lowest median step)
//                                  has a p10-p90 step time clear of (below)
//                                  every other candidate's: "winner"
//                   "within_noise" some candidate's range overlaps the
//                                  fastest's: "within_noise" names the fastest
//                                  and those, in summary order; no winner
//                   "alone"        one candidate only (the baseline, when the
//                                  others were left out): nothing to compare
//                   "none"         no candidate (or no baseline measured)
//   winner          the clear winner's name, else null
//   within_noise    the names within noise of the fastest (empty unless
//                   kind is within_noise)
//   baseline        kBaseline
//   recommendation  the line printed after the table
// Never a winner without a baseline or between overlapping ranges.
nlohmann::json bench_verdict(const nlohmann::json& summary);

// A plain-text table of the summary, one row per contender.
std::string bench_table(const nlohmann::json& summarized);

// A standalone SVG titled with the recipe's name (the synthetic model's
// description without one): per algorithm, a bar of step time split into
// compute and communication, its p10-p90 range as a whisker, a dashed mark
// at its ideal step, and its figures in a column right of every bar, range
// and mark; a time axis (seconds per step) under the bars; and the
// recommendation wrapped to the picture's width. Elements carry classes
// (title, compute, communication, range, ideal, value, time-axis, tick) for
// tests and tools.
std::string bench_svg(const nlohmann::json& summarized);

// `text` broken at spaces into lines of at most `width` characters (a
// longer word stands alone); at least one line.
std::vector<std::string> wrap_words(const std::string& text, size_t width);

}  // namespace bagua::bench
