#include <bagua/checkpoint_meta.h>

#include <bagua/errors.h>

#include <cmath>
#include <cstdio>

namespace bagua {
namespace {

using json = nlohmann::json;

int64_t required_integer(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) {
    throw CheckpointMetaError(std::string("meta.json has no integer '") + key + "'");
  }
  return j[key].get<int64_t>();
}

std::optional<int64_t> optional_integer(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
  return j[key].get<int64_t>();
}

std::vector<CheckpointFile> files_from_json(const json& files) {
  if (!files.is_object()) throw CheckpointMetaError("meta.json's 'files' is not an object");
  std::vector<CheckpointFile> out;
  for (auto it = files.begin(); it != files.end(); ++it) {
    const json& want = it.value();
    if (!want.is_object()) throw CheckpointMetaError("meta.json's entry for " + it.key() + " is not an object");
    if (!want.contains("bytes") || !want["bytes"].is_number_unsigned()) {
      throw CheckpointMetaError("meta.json gives no byte count for " + it.key());
    }
    if (!want.contains("crc32") || !want["crc32"].is_string()) {
      throw CheckpointMetaError("meta.json gives no CRC-32 for " + it.key());
    }
    out.push_back({it.key(), want["bytes"].get<uint64_t>(), want["crc32"].get<std::string>()});
  }
  return out;
}

json best_json(const BestEvaluation& b) {
  return {{"metric", to_string(b.goal.metric)},
          {"mode", to_string(b.goal.mode)},
          {"value", std::isfinite(b.value) ? json(b.value) : json(nullptr)},
          {"step", b.step},
          {"epoch", b.epoch},
          {"evaluations_since", b.evaluations_since}};
}

// A malformed entry reads as absent: the run compares afresh.
std::optional<BestEvaluation> best_from_json(const json& best, const char* key) {
  if (!best.is_object() || !best.contains(key) || !best[key].is_object()) return std::nullopt;
  const json& j = best[key];
  const auto metric = j.contains("metric") && j["metric"].is_string()
                          ? enum_from_string<EvalMetric>(j["metric"].get<std::string>()) : std::nullopt;
  const auto mode = j.contains("mode") && j["mode"].is_string()
                        ? enum_from_string<MetricMode>(j["mode"].get<std::string>()) : std::nullopt;
  if (!metric || !mode) return std::nullopt;
  BestEvaluation b;
  b.goal = {*metric, *mode};
  if (j.contains("value") && j["value"].is_number()) b.value = j["value"].get<double>();
  b.step = optional_integer(j, "step").value_or(0);
  b.epoch = optional_integer(j, "epoch").value_or(0);
  b.evaluations_since = optional_integer(j, "evaluations_since").value_or(0);
  return b;
}

}  // namespace

const CheckpointFile* CheckpointMeta::file(const std::string& name) const {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

json to_json(const CheckpointMeta& m) {
  json files = json::object();
  for (const auto& f : m.files) files[f.name] = {{"bytes", f.bytes}, {"crc32", f.crc32}};
  json j = {{"step", m.position.step},
            {"epoch", m.position.epoch},
            {"batch_in_epoch", m.position.batch_in_epoch},
            {"epoch_start", m.position.epoch_start},
            {"world_size", m.world_size},
            {"recipe", m.recipe},
            {"algorithm", m.algorithm},
            {"algorithm_kwargs", m.algorithm_kwargs},
            {"optimizers", m.optimizers}};
  if (m.has_files) j["files"] = files;
  if (!m.data_plan.is_null()) j["data"] = m.data_plan;
  if (m.global_batch || m.epoch_position || m.schedule || m.schedule_steps > 0) {
    json p = json::object();
    if (m.schedule_steps > 0) p["schedule_steps"] = m.schedule_steps;
    if (m.global_batch) p["global_batch"] = *m.global_batch;
    if (m.epoch_position) p["epoch_position"] = *m.epoch_position;
    if (m.schedule) {
      p["schedule"] = {{"global_batch", m.schedule->global_batch},
                       {"steps_per_epoch", m.schedule->steps_per_epoch},
                       {"by_samples", m.schedule->by_samples}};
    }
    j["progress"] = p;
  }
  if (!m.provenance.is_null()) j["provenance"] = m.provenance;
  if (m.tuned_bucket_bytes > 0) j["tuned_bucket_bytes"] = m.tuned_bucket_bytes;
  if (m.finished) j["finished"] = true;
  if (m.keep_best || m.early_stop) {
    json best = json::object();
    if (m.keep_best) best["keep_best"] = best_json(*m.keep_best);
    if (m.early_stop) best["early_stop"] = best_json(*m.early_stop);
    j["best"] = best;
  }
  if (m.loss_scale) j["loss_scale"] = {{"scale", *m.loss_scale}, {"growth_tracker", m.loss_scale_growth_tracker}};
  return j;
}

CheckpointMeta checkpoint_meta_from_json(const json& j) {
  if (!j.is_object()) throw CheckpointMetaError("meta.json is not a JSON object");
  CheckpointMeta m;
  m.position.step = required_integer(j, "step");
  m.position.epoch = required_integer(j, "epoch");
  m.position.batch_in_epoch = required_integer(j, "batch_in_epoch");
  m.world_size = static_cast<int>(required_integer(j, "world_size"));
  m.optimizers = required_integer(j, "optimizers");
  m.position.epoch_start = optional_integer(j, "epoch_start").value_or(0);
  if (j.contains("recipe") && j["recipe"].is_string()) m.recipe = j["recipe"].get<std::string>();
  if (j.contains("algorithm") && j["algorithm"].is_string()) m.algorithm = j["algorithm"].get<std::string>();
  if (j.contains("algorithm_kwargs")) m.algorithm_kwargs = j["algorithm_kwargs"];
  if (j.contains("files")) {
    m.has_files = true;
    m.files = files_from_json(j["files"]);
  }
  if (j.contains("data")) m.data_plan = j["data"];
  if (j.contains("progress") && j["progress"].is_object()) {
    const json& p = j["progress"];
    m.global_batch = optional_integer(p, "global_batch");
    m.epoch_position = optional_integer(p, "epoch_position");
    m.schedule_steps = optional_integer(p, "schedule_steps").value_or(0);
    if (p.contains("schedule") && p["schedule"].is_object()) {
      const json& s = p["schedule"];
      ScheduleUnits units;
      units.global_batch = optional_integer(s, "global_batch").value_or(0);
      units.steps_per_epoch = optional_integer(s, "steps_per_epoch").value_or(0);
      units.by_samples = s.contains("by_samples") && s["by_samples"].is_boolean() && s["by_samples"].get<bool>();
      m.schedule = units;
    }
  }
  if (j.contains("provenance")) m.provenance = j["provenance"];
  m.tuned_bucket_bytes = optional_integer(j, "tuned_bucket_bytes").value_or(0);
  m.finished = j.contains("finished") && j["finished"].is_boolean() && j["finished"].get<bool>();
  if (j.contains("best")) {
    m.keep_best = best_from_json(j["best"], "keep_best");
    m.early_stop = best_from_json(j["best"], "early_stop");
  }
  if (j.contains("loss_scale") && j["loss_scale"].is_object()) {
    const json& ls = j["loss_scale"];
    if (ls.contains("scale") && ls["scale"].is_number() && ls["scale"].get<double>() > 0) {
      m.loss_scale = ls["scale"].get<double>();
      m.loss_scale_growth_tracker = optional_integer(ls, "growth_tracker").value_or(0);
    }
  }
  return m;
}

CheckpointMeta parse_checkpoint_meta(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception&) {
    throw CheckpointMetaError("meta.json is not valid JSON (cut short?)");
  }
  return checkpoint_meta_from_json(j);
}

json data_plan(const Recipe& recipe, int64_t train_samples) {
  const auto& data = recipe.resolved.at("data");
  return {{"batch_size", data.at("batch_size")},
          {"sampler", data.at("sampler")},
          {"train", data.at("train")},
          {"train_samples", train_samples}};
}

void check_data_plan(const json& saved, const json& now, const std::string& where, bool allow,
                     bool reshards) {
  if (saved.is_null() || !saved.is_object()) return;  // written before this check existed
  std::vector<std::string> changed;
  auto compare = [&](const std::string& key, const json& a, const json& b) {
    if (a != b) changed.push_back(key + ": " + a.dump() + " in the checkpoint, " + b.dump() + " now");
  };
  if (!reshards) compare("data.batch_size", saved.value("batch_size", json()), now.at("batch_size"));
  const auto& ss = saved.value("sampler", json::object());
  for (auto it = now.at("sampler").begin(); it != now.at("sampler").end(); ++it) {
    compare("data.sampler." + it.key(), ss.value(it.key(), json()), it.value());
  }
  compare("data.train", saved.value("train", json()), now.at("train"));
  compare("the number of training samples", saved.value("train_samples", json()), now.at("train_samples"));
  if (changed.empty()) return;
  std::string list;
  for (const auto& c : changed) list += "\n  " + c;
  if (allow) {
    std::fprintf(stderr, "WARNING: resuming from %s although the batches differ from the run that wrote it "
                 "(checkpoint.allow_data_change is true):%s\n", where.c_str(), list.c_str());
    return;
  }
  throw Error("resuming from " + where + " would silently change what the saved position in the epoch means:" +
                  list + "\nRun with the checkpoint's settings, start afresh (--set checkpoint.resume=never or "
                  "another output.dir), or accept the change with --set checkpoint.allow_data_change=true",
              true);
}

int64_t data_plan_batch_size(const json& plan, int64_t fallback) {
  if (plan.is_object() && plan.contains("batch_size") && plan["batch_size"].is_number_integer()) {
    return plan["batch_size"].get<int64_t>();
  }
  return fallback;
}

}  // namespace bagua
