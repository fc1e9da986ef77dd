// What `bagua bench` makes of the workers' raw figures: one summary per
// algorithm, the table, the one-line recommendation and the SVG chart.
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
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bagua::bench {

// raw: run_bench_worker()'s JSON. Returns it with "summary" (one object per
// contender, "local" first) and "recommendation" (a line) added.
nlohmann::json summarize_bench(nlohmann::json raw);

// A plain-text table of the summary, one row per contender.
std::string bench_table(const nlohmann::json& summarized);

// A standalone SVG: per algorithm, a bar of step time split into compute and
// communication, a dashed mark at its ideal step, the figures beside it,
// and the recommendation wrapped to the picture's width.
std::string bench_svg(const nlohmann::json& summarized);

// `text` broken at spaces into lines of at most `width` characters (a
// longer word stands alone); at least one line.
std::vector<std::string> wrap_words(const std::string& text, size_t width);

}  // namespace bagua::bench
