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
  double steps_per_s = r.time > 0 ? static_cast<double>(r.step - start_step_) / r.time : 0;
  last_rate_ = steps_per_s;
  if (bar_) {
    draw(r.step, r.epoch, r.samples_per_s);
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

void RunLog::eval(const EvalRecord& r) {
  if (!enabled_) return;
  write_line(r);
  write_tensorboard(r.step, metrics::tensorboard_scalars(r));
  char line[200];
  if (r.eval_accuracy) {
    std::snprintf(line, sizeof(line), "eval after epoch %lld step %lld: loss %.4f accuracy %.2f%% (%lld samples)",
                  static_cast<long long>(r.epoch), static_cast<long long>(r.step), r.eval_loss,
                  100.0 * *r.eval_accuracy, static_cast<long long>(r.eval_samples));
  } else {
    std::snprintf(line, sizeof(line), "eval after epoch %lld step %lld: loss %.4f (%lld samples)",
                  static_cast<long long>(r.epoch), static_cast<long long>(r.step), r.eval_loss,
                  static_cast<long long>(r.eval_samples));
  }
  say(line);
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
  std::fprintf(bar_, "\r\033[Kepoch %lld [%s] %lld/%lld loss %.4f%s %.1f it/s ETA %s",
               static_cast<long long>(epoch), bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_steps_), last_loss_, rate, last_rate_, duration(eta).c_str());
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
