// metrics.jsonl records both ways (bagua/metrics.h).
#include <bagua/metrics.h>

#include <bagua/errors.h>

#include <cmath>
#include <fstream>

namespace bagua::metrics {

namespace {

using json = nlohmann::json;

// The key whose presence says what kind a record is, in the order checked.
constexpr const char* kResumeKey = "resumed_from";
constexpr const char* kStepKey = "loss";
constexpr const char* kEvalKey = "eval_loss";
constexpr const char* kAutotuneKey = "autotune";
constexpr const char* kMemoryKey = "peak_rss_bytes";

// A required number; null (how JSON writes NaN) reads as NaN.
double number(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": this record has no \"" + key + "\"", true);
  const json& v = j[key];
  if (v.is_null()) return NAN;
  if (!v.is_number()) throw Error(where + ": \"" + key + "\" is not a number", true);
  return v.get<double>();
}

// An optional number (absent: the default), else as number().
double number_or(const json& j, const char* key, double otherwise, const std::string& where) {
  return j.contains(key) ? number(j, key, where) : otherwise;
}

int64_t integer(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    throw Error(where + ": this record has no integer \"" + std::string(key) + "\"", true);
  }
  return j[key].get<int64_t>();
}

int64_t integer_or(const json& j, const char* key, int64_t otherwise, const std::string& where) {
  return j.contains(key) ? integer(j, key, where) : otherwise;
}

// A double that JSON can hold: NaN and infinities become null.
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json step_json(const StepRecord& r) {
  json j = {{"step", r.step}, {"epoch", r.epoch}, {"loss", finite_or_null(r.loss)}, {"lr", r.lr},
            {"samples_per_s", r.samples_per_s}, {"time", r.time}, {"comm_bytes", r.comm_bytes}};
  if (r.nonfinite_skips) j["nonfinite_skips"] = *r.nonfinite_skips;
  if (r.skipped_images) j["skipped_images"] = *r.skipped_images;
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  if (r.overflow_skips) j["overflow_skips"] = *r.overflow_skips;
  if (r.grad_norm) j["grad_norm"] = finite_or_null(*r.grad_norm);
  if (r.padding) j["padding"] = *r.padding;
  if (!r.lrs.empty()) j["lrs"] = r.lrs;
  if (r.diverging) j["diverging"] = true;
  return j;
}

json eval_json(const EvalRecord& r) {
  json j = {{"step", r.step}, {"epoch", r.epoch}, {"eval_loss", finite_or_null(r.eval_loss)},
            {"eval_samples", r.eval_samples}, {"time", r.time}};
  if (r.eval_accuracy) j["eval_accuracy"] = *r.eval_accuracy;
  if (r.eval_perplexity) j["eval_perplexity"] = finite_or_null(*r.eval_perplexity);
  if (!r.best.empty()) j["best"] = r.best;
  if (r.early_stop) j["early_stop"] = true;
  return j;
}

json autotune_json(const AutotuneRecord& r) {
  json trials = json::array();
  for (const auto& t : r.trials) {
    trials.push_back({{"bucket_bytes", t.bucket_bytes}, {"buckets", t.buckets}, {"step_s", t.step_s}});
  }
  return {{"step", r.step}, {"autotune", {{"bucket_bytes", r.bucket_bytes}, {"trials", trials}}}};
}

StepRecord step_from(const json& j, const std::string& where) {
  StepRecord r;
  r.step = integer(j, "step", where);
  r.loss = number(j, "loss", where);
  r.samples_per_s = number(j, "samples_per_s", where);
  r.time = number(j, "time", where);
  r.epoch = integer_or(j, "epoch", 0, where);
  r.lr = number_or(j, "lr", 0, where);
  r.comm_bytes = integer_or(j, "comm_bytes", 0, where);
  if (j.contains("nonfinite_skips")) r.nonfinite_skips = integer(j, "nonfinite_skips", where);
  if (j.contains("skipped_images")) r.skipped_images = integer(j, "skipped_images", where);
  if (j.contains("loss_scale") && j["loss_scale"].is_number()) r.loss_scale = number(j, "loss_scale", where);
  if (j.contains("overflow_skips")) r.overflow_skips = integer(j, "overflow_skips", where);
  if (j.contains("grad_norm") && j["grad_norm"].is_number()) r.grad_norm = number(j, "grad_norm", where);
  if (j.contains("padding")) r.padding = number(j, "padding", where);
  if (j.contains("diverging")) {
    if (!j["diverging"].is_boolean()) throw Error(where + ": \"diverging\" is not true or false", true);
    r.diverging = j["diverging"].get<bool>();
  }
  if (j.contains("lrs")) {
    if (!j["lrs"].is_array()) throw Error(where + ": \"lrs\" is not a list", true);
    for (const auto& v : j["lrs"]) r.lrs.push_back(v.is_number() ? v.get<double>() : NAN);
  }
  return r;
}

EvalRecord eval_from(const json& j, const std::string& where) {
  EvalRecord r;
  r.step = integer(j, "step", where);
  r.eval_loss = number(j, "eval_loss", where);
  if (j.contains("eval_accuracy")) r.eval_accuracy = number(j, "eval_accuracy", where);
  if (j.contains("eval_perplexity") && j["eval_perplexity"].is_number())
    r.eval_perplexity = number(j, "eval_perplexity", where);
  r.time = number(j, "time", where);
  r.epoch = integer_or(j, "epoch", 0, where);
  r.eval_samples = integer_or(j, "eval_samples", 0, where);
  if (j.contains("best")) {
    if (!j["best"].is_string()) throw Error(where + ": \"best\" is not a string", true);
    r.best = j["best"].get<std::string>();
  }
  if (j.contains("early_stop")) {
    if (!j["early_stop"].is_boolean()) throw Error(where + ": \"early_stop\" is not true or false", true);
    r.early_stop = j["early_stop"].get<bool>();
  }
  return r;
}

AutotuneRecord autotune_from(const json& j, const std::string& where) {
  AutotuneRecord r;
  r.step = integer(j, "step", where);
  const json& a = j[kAutotuneKey];
  if (!a.is_object()) throw Error(where + ": \"autotune\" is not an object", true);
  r.bucket_bytes = integer(a, "bucket_bytes", where);
  if (a.contains("trials") && a["trials"].is_array()) {
    for (const auto& t : a["trials"]) {
      if (!t.is_object()) throw Error(where + ": an autotune trial is not an object", true);
      r.trials.push_back({integer(t, "bucket_bytes", where), integer(t, "buckets", where), number(t, "step_s", where)});
    }
  }
  return r;
}

MemoryRecord memory_from(const json& j, const std::string& where) {
  MemoryRecord r;
  r.step = integer(j, "step", where);
  const json& bytes = j[kMemoryKey];
  if (!bytes.is_array()) throw Error(where + ": \"peak_rss_bytes\" is not a list", true);
  for (const auto& b : bytes) {
    if (!b.is_number_integer()) throw Error(where + ": \"peak_rss_bytes\" holds a value that is not an integer", true);
    r.peak_rss_bytes.push_back(b.get<int64_t>());
  }
  return r;
}

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace

std::optional<double> eval_figure(const EvalRecord& r, const std::string& name) {
  if (name == kEvalKey) return r.eval_loss;
  if (name == "eval_accuracy") return r.eval_accuracy;
  if (name == "eval_perplexity") return r.eval_perplexity;
  return std::nullopt;
}

json to_json(const Record& record) {
  return std::visit(Overloaded{[](const StepRecord& r) { return step_json(r); },
                               [](const EvalRecord& r) { return eval_json(r); },
                               [](const ResumeRecord& r) {
                                 json j{{"step", r.step}, {kResumeKey, r.resumed_from}};
                                 if (r.redone_steps > 0) j["redone_steps"] = r.redone_steps;
                                 if (r.redone_samples > 0) j["redone_samples"] = r.redone_samples;
                                 if (r.restart > 0) j["restart"] = r.restart;
                                 if (r.nodes > 0) j["nodes"] = r.nodes;
                                 if (r.previous_world_size > 0) {
                                   j["resized"] = {{"world_size", {r.previous_world_size, r.world_size}},
                                                   {"global_batch", {r.previous_global_batch, r.global_batch}},
                                                   {"epoch", r.epoch},
                                                   {"epoch_position", r.epoch_position}};
                                 }
                                 return j;
                               },
                               [](const AutotuneRecord& r) { return autotune_json(r); },
                               [](const MemoryRecord& r) {
                                 return json{{"step", r.step}, {kMemoryKey, r.peak_rss_bytes}};
                               }},
                    record);
}

std::optional<Record> record_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw Error(where + ": not a JSON object", true);
  if (j.contains(kResumeKey)) {
    ResumeRecord r;
    r.step = integer(j, "step", where);
    if (!j[kResumeKey].is_string()) throw Error(where + ": \"resumed_from\" is not a string", true);
    r.resumed_from = j[kResumeKey].get<std::string>();
    r.redone_steps = integer_or(j, "redone_steps", 0, where);
    r.redone_samples = integer_or(j, "redone_samples", 0, where);
    r.restart = integer_or(j, "restart", 0, where);
    r.nodes = integer_or(j, "nodes", 0, where);
    if (j.contains("resized")) {
      const json& z = j["resized"];
      auto pair = [&](const char* key, int64_t& before, int64_t& now) {
        if (!z.is_object() || !z.contains(key) || !z[key].is_array() || z[key].size() != 2 ||
            !z[key][0].is_number_integer() || !z[key][1].is_number_integer()) {
          throw Error(where + ": \"resized\" has no [before, now] pair \"" + key + "\"", true);
        }
        before = z[key][0].get<int64_t>();
        now = z[key][1].get<int64_t>();
      };
      pair("world_size", r.previous_world_size, r.world_size);
      pair("global_batch", r.previous_global_batch, r.global_batch);
      r.epoch = integer(z, "epoch", where);
      r.epoch_position = integer(z, "epoch_position", where);
    }
    return r;
  }
  if (j.contains(kStepKey)) return step_from(j, where);
  if (j.contains(kEvalKey)) return eval_from(j, where);
  if (j.contains(kAutotuneKey)) return autotune_from(j, where);
  if (j.contains(kMemoryKey)) return memory_from(j, where);
  return std::nullopt;
}

std::vector<Record> read_metrics_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot be read", true);
  std::vector<Record> out;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const std::string where = path + ":" + std::to_string(line_number);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw Error(where + ": not a JSON object", true);
    if (auto record = record_from_json(j, where)) out.push_back(std::move(*record));
  }
  return out;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const Record& record) {
  std::vector<std::pair<std::string, double>> s;
  if (const auto* r = std::get_if<StepRecord>(&record)) {
    s = {{"train/loss", r->loss}, {"train/lr", r->lr}, {"train/samples_per_s", r->samples_per_s},
         {"comm/bytes", static_cast<double>(r->comm_bytes)}};
    for (size_t i = 0; i < r->lrs.size(); ++i) s.emplace_back("train/lr/" + std::to_string(i), r->lrs[i]);
    if (r->nonfinite_skips) s.emplace_back("train/nonfinite_skips", static_cast<double>(*r->nonfinite_skips));
    if (r->skipped_images) s.emplace_back("train/skipped_images", static_cast<double>(*r->skipped_images));
    if (r->loss_scale) s.emplace_back("train/loss_scale", *r->loss_scale);
    if (r->overflow_skips) s.emplace_back("train/overflow_skips", static_cast<double>(*r->overflow_skips));
    if (r->grad_norm) s.emplace_back("train/grad_norm", *r->grad_norm);
    if (r->padding) s.emplace_back("train/padding", *r->padding);
    if (r->diverging) s.emplace_back("train/diverging", 1.0);
  } else if (const auto* e = std::get_if<EvalRecord>(&record)) {
    s = {{"eval/loss", e->eval_loss}};
    if (e->eval_accuracy) s.emplace_back("eval/accuracy", *e->eval_accuracy);
    if (e->eval_perplexity) s.emplace_back("eval/perplexity", *e->eval_perplexity);
  }
  return s;
}

}  // namespace bagua::metrics
