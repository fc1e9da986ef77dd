#include "train/run_log.h"

#include <bagua/errors.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>

namespace bagua::train {
namespace {
std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%lds", s);
  }
  return buf;
}

}  // namespace

RunLog::RunLog(const std::string& metrics_path, bool enabled, int64_t total_steps, bool append, int64_t start_step)
    : enabled_(enabled), total_steps_(total_steps), start_step_(start_step), start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {
  if (!enabled_) return;
  // A resumed run's best evaluation so far includes the runs before it,
  // up to the checkpoint it resumed from (a later one was redone); the
  // last step they logged feeds the resume message.
  if (append) {
    try {
      for (const metrics::Record& record : metrics::read_metrics_file(metrics_path)) {
        if (const auto* r = std::get_if<EvalRecord>(&record); r && r->step <= start_step) note_best(*r);
        if (const auto* s = std::get_if<StepRecord>(&record)) logged_before_ = s->step;
        if (const auto* s = std::get_if<metrics::ResumeRecord>(&record)) logged_before_ = s->step;
      }
    } catch (const std::exception&) {
      // No earlier file, or one we cannot read: this run's evaluations only.
      logged_before_ = 0;
    }
  }
  metrics_.open(metrics_path, append ? std::ios::app : std::ios::trunc);
  const char* progress = std::getenv("BAGUA_PROGRESS");
  if (progress && std::string(progress) == "tty") {
    bar_ = std::fopen("/dev/tty", "w");
    own_bar_ = bar_ != nullptr;
  } else if (isatty(STDERR_FILENO) == 1 && !(progress && std::string(progress) == "plain")) {
    bar_ = stderr;
  }
}

RunLog::~RunLog() {
  if (bar_ && bar_on_screen_) std::fprintf(bar_, "\r\033[K");
  if (own_bar_) std::fclose(bar_);
}

void RunLog::add_tensorboard(const std::string& dir) {
  if (!enabled_) return;
  tensorboard_ = std::make_unique<TensorBoardWriter>(dir);
}

// A failed write (a full disk) stops the event file, not the training:
// metrics.jsonl still has every record.
void RunLog::write_tensorboard(int64_t step, const Scalars& values) {
  if (!tensorboard_) return;
  try {
    tensorboard_->scalars(step, values);
  } catch (const Error& e) {
    tensorboard_.reset();
    say(std::string("WARNING: TensorBoard events stop at step ") + std::to_string(step) + ": " + e.what());
  }
}

double RunLog::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RunLog::step(const StepRecord& r) {
  if (!enabled_) return;
  write_line(r);
  write_tensorboard(r.step, metrics::tensorboard_scalars(r));
  last_loss_ = r.loss;
  if (r.time > last_time_) samples_ += r.samples_per_s * (r.time - last_time_);
  last_time_ = r.time;
  last_step_ = r.step;
  double steps_per_s = r.time > 0 ? static_cast<double>(r.step - start_step_) / r.time : 0;
  last_rate_ = steps_per_s;
  if (bar_) {
    draw(r.step, r.epoch, r.samples_per_s);
    if (r.step >= total_steps_) {
      // The last step: the bar stays on the screen in its final state.
      std::fprintf(bar_, "\n");
      std::fflush(bar_);
      bar_on_screen_ = false;
    }
  } else {
    char line[256];
    double eta = steps_per_s > 0 ? static_cast<double>(total_steps_ - r.step) / steps_per_s : NAN;
    std::snprintf(line, sizeof(line), "epoch %lld step %lld/%lld loss %.4f lr %.3g %.0f samples/s elapsed %s ETA %s",
                  static_cast<long long>(r.epoch), static_cast<long long>(r.step),
                  static_cast<long long>(total_steps_), r.loss, r.lr, r.samples_per_s,
                  duration(r.time).c_str(), duration(eta).c_str());
    say(line);
  }
}

void RunLog::record(const metrics::Record& record) {
  if (!enabled_) return;
  write_line(record);
}

void RunLog::write_line(const metrics::Record& record) {
  metrics_ << metrics::to_json(record).dump() << "\n";
  metrics_.flush();
}

void RunLog::note_best(const EvalRecord& r) {
  // The best: the highest accuracy for classification, else the lowest loss.
  const bool better = !best_eval_ || (r.eval_accuracy ? r.eval_accuracy > best_eval_->eval_accuracy
                                                      : r.eval_loss < best_eval_->eval_loss);
  if (better) best_eval_ = r;
}

void RunLog::eval(const EvalRecord& r) {
  if (!enabled_) return;
  last_eval_ = r;
  note_best(r);
  write_line(r);
  write_tensorboard(r.step, metrics::tensorboard_scalars(r));
  char line[200];
  if (r.eval_accuracy && r.eval_perplexity) {
    std::snprintf(line, sizeof(line),
                  "eval at step %lld (epoch %lld): loss %.4f perplexity %.2f accuracy %.2f%% (%lld samples)",
                  static_cast<long long>(r.step), static_cast<long long>(r.epoch), r.eval_loss, *r.eval_perplexity,
                  100.0 * *r.eval_accuracy, static_cast<long long>(r.eval_samples));
  } else if (r.eval_accuracy) {
    std::snprintf(line, sizeof(line), "eval at step %lld (epoch %lld): loss %.4f accuracy %.2f%% (%lld samples)",
                  static_cast<long long>(r.step), static_cast<long long>(r.epoch), r.eval_loss,
                  100.0 * *r.eval_accuracy, static_cast<long long>(r.eval_samples));
  } else {
    std::snprintf(line, sizeof(line), "eval at step %lld (epoch %lld): loss %.4f (%lld samples)",
                  static_cast<long long>(r.step), static_cast<long long>(r.epoch), r.eval_loss,
                  static_cast<long long>(r.eval_samples));
  }
  // checkpoint.keep_best kept this evaluation's model.
  say(r.best.empty() ? std::string(line) : std::string(line) + ", best " + r.best + " so far");
}

std::string RunLog::summary(int64_t step) const {
  std::string line = "done: " + std::to_string(step) + " steps in " + duration(elapsed());
  if (start_step_ > 0) line += " (" + std::to_string(step - start_step_) + " in this run)";
  char part[160];
  if (last_step_ > start_step_ && std::isfinite(last_loss_)) {
    std::snprintf(part, sizeof(part), ", final loss %.4f", last_loss_);
    line += part;
  }
  if (last_eval_ && best_eval_) {
    const metrics::EvalRecord& last = *last_eval_;
    const metrics::EvalRecord& best = *best_eval_;
    if (last.eval_accuracy && best.eval_accuracy) {
      std::snprintf(part, sizeof(part), ", eval accuracy %.2f%%", 100.0 * *last.eval_accuracy);
      line += part;
      if (*best.eval_accuracy > *last.eval_accuracy) {
        std::snprintf(part, sizeof(part), " (best %.2f%% at step %lld)", 100.0 * *best.eval_accuracy,
                      static_cast<long long>(best.step));
        line += part;
      }
    } else {
      std::snprintf(part, sizeof(part), ", eval loss %.4f", last.eval_loss);
      line += part;
      if (best.eval_loss < last.eval_loss) {
        std::snprintf(part, sizeof(part), " (best %.4f at step %lld)", best.eval_loss,
                      static_cast<long long>(best.step));
        line += part;
      }
    }
  }
  if (samples_ > 0 && last_time_ > 0) {
    std::snprintf(part, sizeof(part), ", %.0f samples/s", samples_ / last_time_);
    line += part;
  }
  return line;
}

void RunLog::tick(int64_t step, int64_t epoch) {
  if (!enabled_ || !bar_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;
  double t = elapsed();
  last_rate_ = t > 0 ? static_cast<double>(step - start_step_) / t : 0;
  draw(step, epoch, -1);
}

void RunLog::draw(int64_t step, int64_t epoch, double samples_per_s) {
  last_draw_ = std::chrono::steady_clock::now();
  const int width = 30;
  double frac = total_steps_ > 0 ? std::min(1.0, static_cast<double>(step) / total_steps_) : 0;
  std::string bar(static_cast<size_t>(frac * width), '#');
  bar.resize(width, '.');
  double eta = last_rate_ > 0 ? static_cast<double>(total_steps_ - step) / last_rate_ : NAN;
  char rate[48] = "";
  if (samples_per_s >= 0) std::snprintf(rate, sizeof(rate), " %.0f samples/s", samples_per_s);
  // No loss until this run's first record: "-", not a made-up 0.0000.
  char loss[32] = "-";
  if (last_step_ > start_step_) std::snprintf(loss, sizeof(loss), "%.4f", last_loss_);
  std::fprintf(bar_, "\r\033[Kepoch %lld [%s] %lld/%lld loss %s%s %.1f it/s ETA %s",
               static_cast<long long>(epoch), bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_steps_), loss, rate, last_rate_, duration(eta).c_str());
  std::fflush(bar_);
  bar_on_screen_ = true;
}

void RunLog::say(const std::string& line) {
  if (!enabled_) return;
  if (bar_on_screen_) {
    std::fprintf(bar_, "\r\033[K");
    std::fflush(bar_);
    bar_on_screen_ = false;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace bagua::train
