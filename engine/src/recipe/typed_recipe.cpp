// A checked, defaults-filled recipe tree -> the typed Recipe.
//
// Every value read here was filled by the schema walker (defaults) or
// checked by it, so lookups use .at(): a missing key is a bug, not user input.
#include "stages.h"

#include <cmath>

namespace bagua {

namespace {
template <typename Enum>
Enum enum_from(const std::string& text) {
  if (auto value = enum_from_string<Enum>(text)) return *value;
  throw Error("recipe: unexpected value " + text + " after validation");
}
}  // namespace

std::optional<int64_t> parse_byte_size(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number(text.substr(0, i));
  if (number.empty() || number.front() == '.' || number.back() == '.' ||
      std::count(number.begin(), number.end(), '.') > 1)
    return std::nullopt;
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit(text.substr(i));
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    double bytes = std::stod(number) * scale;
    if (!(bytes <= 4.6e18)) return std::nullopt;
    return static_cast<int64_t>(std::floor(bytes));
  }
  return std::nullopt;
}

namespace recipe {
namespace {

std::optional<int64_t> optional_int(const json& v) {
  if (v.is_null()) return std::nullopt;
  return v.get<int64_t>();
}

ColumnRef column(const json& v) {
  ColumnRef c;
  if (!v.is_string()) {
    c.index = v.get<int64_t>();
  } else if (ColumnRange range; classify_column_text(v.get<std::string>(), &range) == ColumnText::kRange) {
    c.index = range.first;  // the semantic checks refused a malformed or backward one
    c.last = range.last;
  } else {
    c.name = v.get<std::string>();
  }
  return c;
}

// input_columns / exclude_columns: one column, a range, or a list of them.
std::vector<ColumnRef> columns(const json& v) {
  std::vector<ColumnRef> out;
  if (v.is_array()) {
    for (const auto& c : v) out.push_back(column(c));
  } else if (!v.is_null()) {
    out.push_back(column(v));
  }
  return out;
}

std::vector<double> numbers(const json& v) {
  if (v.is_array()) return v.get<std::vector<double>>();
  return {v.get<double>()};
}

MeanStd mean_std(const json& normalize) {
  MeanStd m;
  if (!normalize.is_object()) return m;
  m.mean = numbers(normalize.at("mean"));
  m.std = numbers(normalize.at("std"));
  return m;
}

DataSource data_source(const json& j) {
  DataSource d;
  d.format = enum_from<DataFormat>(j.at("format").get<std::string>());
  switch (d.format) {
    case DataFormat::kIdx:
      d.images = j.at("images").get<std::string>();
      d.labels = j.at("labels").get<std::string>();
      d.normalize = j.at("normalize") != false;  // true, or {mean, std} after the / 255
      d.mean_std = mean_std(j.at("normalize"));
      break;
    case DataFormat::kCsv:
      d.path = j.at("path").get<std::string>();
      d.target_column = column(j.at("target_column"));
      d.input_columns = columns(j.at("input_columns"));
      d.exclude_columns = columns(j.at("exclude_columns"));
      d.mean_std = mean_std(j.at("normalize"));
      d.header = j.at("header").get<bool>();
      d.delimiter = j.at("delimiter").get<std::string>()[0];
      break;
    case DataFormat::kJsonl:
      d.path = j.at("path").get<std::string>();
      d.input_field = j.at("input_field").get<std::string>();
      d.target_field = j.at("target_field").get<std::string>();
      d.pad_value = j.at("pad_value").get<int64_t>();
      d.max_length = optional_int(j.at("max_length"));
      break;
    case DataFormat::kTensors:
      d.path = j.at("path").get<std::string>();
      d.input_key = j.at("input_key").get<std::string>();
      d.target_key = j.at("target_key").get<std::string>();
      break;
    case DataFormat::kTokens: {
      const json& path = j.at("path");
      if (path.is_array()) {
        for (const auto& p : path) d.shards.push_back(p.get<std::string>());
      } else {
        d.shards.push_back(path.get<std::string>());
      }
      d.token_bytes = j.at("dtype") == "uint32" ? 4 : 2;
      d.context = j.at("context").get<int64_t>();
      d.stride = optional_int(j.at("stride")).value_or(d.context);
      d.vocab_size = optional_int(j.at("vocab_size"));
      break;
    }
    case DataFormat::kImageFolder:
      d.path = j.at("path").get<std::string>();
      d.resize = optional_int(j.at("resize")).value_or(0);
      d.mean_std = mean_std(j.at("normalize"));
      d.random_flip = j.at("random_flip").get<bool>();
      if (const json& crop = j.at("random_crop"); crop.is_object()) d.crop_padding = crop.value("padding", int64_t{0});
      d.skip_unreadable = j.at("skip_unreadable").get<bool>();
      break;
  }
  if (j.contains("input_shape") && !j["input_shape"].is_null())
    d.input_shape = j["input_shape"].get<std::vector<int64_t>>();
  return d;
}

OptimizerSpec optimizer(const json& j) {
  OptimizerSpec o;
  o.type = enum_from<OptimizerType>(j.at("type").get<std::string>());
  o.lr = j.at("lr").get<double>();
  o.params = j.at("params").get<std::vector<std::string>>();
  o.fused = j.at("fused").get<bool>();
  o.weight_decay = j.at("weight_decay").get<double>();
  o.momentum = j.value("momentum", o.momentum);
  o.dampening = j.value("dampening", o.dampening);
  o.nesterov = j.value("nesterov", o.nesterov);
  if (j.contains("betas")) o.betas = {j["betas"][0].get<double>(), j["betas"][1].get<double>()};
  o.eps = j.value("eps", o.eps);
  o.amsgrad = j.value("amsgrad", o.amsgrad);
  o.alpha = j.value("alpha", o.alpha);
  o.centered = j.value("centered", o.centered);
  o.lr_decay = j.value("lr_decay", o.lr_decay);
  o.initial_accumulator_value = j.value("initial_accumulator_value", o.initial_accumulator_value);
  o.warmup_steps = j.value("warmup_steps", o.warmup_steps);
  return o;
}

// checkpoint.keep_best's or train.early_stop's mapping (the semantic checks
// resolved keep_best: true and an unwritten mode).
EvalGoal eval_goal(const json& j) {
  return {enum_from<EvalMetric>(j.at("metric").get<std::string>()),
          enum_from<MetricMode>(j.at("mode").get<std::string>())};
}

}  // namespace

Recipe to_typed_recipe(const json& doc) {
  Recipe r;
  r.name = doc.at("name").get<std::string>();
  r.description = doc.value("description", std::string());
  r.resolved = doc;

  const json& m = doc.at("model");
  r.model.torchscript = m.at("torchscript").get<std::string>();
  r.model.ignore_params = m.at("ignore_params").get<std::vector<std::string>>();
  r.model.loss = enum_from<Loss>(m.at("loss").get<std::string>());

  const json& d = doc.at("data");
  r.data.train = data_source(d.at("train"));
  if (!d.at("eval").is_null()) r.data.eval = data_source(d.at("eval"));
  r.data.batch_size = d.at("batch_size").get<int64_t>();
  if (const json& t = d.at("loader_threads"); t.is_number_integer()) r.data.loader_threads = t.get<int64_t>();
  const json& s = d.at("sampler");
  r.data.sampler.type = enum_from<SamplerType>(s.at("type").get<std::string>());
  r.data.sampler.shuffle = s.at("shuffle").get<bool>();
  r.data.sampler.seed = s.at("seed").get<uint64_t>();
  r.data.sampler.drop_last = s.at("drop_last").get<bool>();
  r.data.sampler.complexity_field = s.value("complexity_field", std::string());
  r.data.sampler.random_level = s.value("random_level", 0.0);
  if (s.contains("batch_complexity")) r.data.sampler.batch_complexity = optional_int(s.at("batch_complexity"));
  if (const json& c = d.at("cache"); !c.is_null()) {
    CacheSpec cache;
    cache.backend = c.at("backend").get<std::string>();
    cache.dataset_name = c.at("dataset_name").get<std::string>();
    cache.writer_buffer_size = c.at("writer_buffer_size").get<int64_t>();
    if (!c.at("hosts").is_null())
      for (const auto& h : c.at("hosts")) cache.hosts.push_back({h.at("host").get<std::string>(), h.at("port").get<int>()});
    cache.cluster_mode = c.at("cluster_mode").get<bool>();
    const json& cap = c.at("capacity_per_node");
    cache.capacity_per_node = cap.get<int64_t>();  // bytes: check_sizes normalised it
    r.data.cache = cache;
  }

  for (const auto& o : doc.at("optimizers")) r.optimizers.push_back(optimizer(o));

  const json& sch = doc.at("scheduler");
  r.scheduler.type = enum_from<SchedulerType>(sch.at("type").get<std::string>());
  r.scheduler.warmup_steps = sch.at("warmup_steps").get<int64_t>();
  r.scheduler.step_size = sch.value("step_size", int64_t{0});
  r.scheduler.gamma = sch.value("gamma", r.scheduler.gamma);
  r.scheduler.total_steps = sch.contains("total_steps") ? optional_int(sch["total_steps"]) : std::nullopt;
  r.scheduler.min_lr = sch.value("min_lr", 0.0);
  r.scheduler.end_factor = sch.value("end_factor", 0.0);

  const json& a = doc.at("algorithm");
  r.algorithm.name = a.at("name").get<std::string>();
  r.algorithm.flatten = a.at("flatten").get<bool>();
  if (a.at("bucket_size") == "auto") {
    r.algorithm.bucket_size_auto = true;  // tuned from the default size
  } else {
    r.algorithm.bucket_size = a.at("bucket_size").get<int64_t>();  // bytes: check_sizes normalised it
  }
  r.algorithm.kwargs = json::object();
  for (auto it = a.begin(); it != a.end(); ++it)
    if (it.key() != "name" && it.key() != "flatten" && it.key() != "bucket_size") r.algorithm.kwargs[it.key()] = *it;

  const json& dist = doc.at("distributed");
  r.distributed.backend = enum_from<Backend>(dist.at("backend").get<std::string>());
  r.distributed.nproc_per_node = dist.at("nproc_per_node").get<int>();
  if (const json& n = dist.at("nnodes"); n.is_string()) {
    // "MIN:MAX", as the schema's pattern and check_layout() let through.
    const std::string text = n.get<std::string>();
    const auto colon = text.find(':');
    r.distributed.nnodes = std::stoi(text.substr(0, colon));
    r.distributed.nnodes_max = std::stoi(text.substr(colon + 1));
  } else {
    r.distributed.nnodes = n.get<int>();
  }
  r.distributed.node_rank = dist.at("node_rank").get<int>();
  r.distributed.master_addr = dist.at("master_addr").get<std::string>();
  {
    auto port = optional_int(dist.at("master_port"));
    if (port) r.distributed.master_port = static_cast<int>(*port);
  }
  r.distributed.timeout_s = dist.at("timeout_s").get<int>();
  r.distributed.stall_warning_s = dist.at("stall_warning_s").get<int>();
  r.distributed.max_restarts = dist.at("max_restarts").get<int>();
  r.distributed.stop_grace_s = dist.at("stop_grace_s").get<int>();
  r.distributed.rdzv_last_call_s = dist.at("rdzv_last_call_s").get<int>();

  const json& t = doc.at("train");
  r.train.epochs = t.at("epochs").get<int64_t>();
  r.train.max_steps = optional_int(t.at("max_steps"));
  r.train.global_batch_size = optional_int(t.at("global_batch_size"));
  r.train.seed = t.at("seed").get<uint64_t>();
  r.train.log_every_steps = t.at("log_every_steps").get<int64_t>();
  const json& every = t.at("eval_every");
  if (every == "epoch") r.train.eval_every.kind = EvalSchedule::Kind::kEpoch;
  else if (every == "never") r.train.eval_every.kind = EvalSchedule::Kind::kNever;
  else r.train.eval_every = {EvalSchedule::Kind::kSteps, every.get<int64_t>()};
  if (!t.at("threads").is_null()) r.train.threads = t.at("threads").get<int>();
  r.train.tuned_allocator = t.at("allocator").get<std::string>() == "tuned";
  r.train.device = enum_from<Device>(t.at("device").get<std::string>());
  r.train.on_nonfinite = enum_from<OnNonFinite>(t.at("on_nonfinite").get<std::string>());
  r.train.grad_accum_steps = t.at("grad_accum_steps").get<int64_t>();
  if (const json& clip = t.at("clip_grad_norm"); clip.is_number()) r.train.clip_grad_norm = clip.get<double>();
  const std::string precision = t.at("precision").get<std::string>();
  r.train.precision = precision == "bf16" ? Precision::kBf16 : precision == "fp16" ? Precision::kFp16 : Precision::kFp32;
  if (const json& e = t.at("early_stop"); !e.is_null()) {
    r.train.early_stop = EarlyStopSpec{eval_goal(e), e.at("patience").get<int64_t>(), e.at("min_delta").get<double>()};
  }

  const json& c = doc.at("checkpoint");
  r.checkpoint.every_steps = optional_int(c.at("every_steps"));
  r.checkpoint.keep = c.at("keep").get<int64_t>();
  r.checkpoint.allow_data_change = c.at("allow_data_change").get<bool>();
  r.checkpoint.allow_model_change = c.at("allow_model_change").get<bool>();
  r.checkpoint.allow_recipe_change = c.at("allow_recipe_change").get<bool>();
  r.checkpoint.resume = c.at("resume").get<std::string>();
  if (const json& k = c.at("keep_best"); k.is_object()) r.checkpoint.keep_best = eval_goal(k);

  const json& o = doc.at("output");
  r.output.dir = o.at("dir").get<std::string>();
  r.output.trace = o.at("trace").get<bool>();
  r.output.trace_from_step = o.at("trace_from_step").get<int64_t>();
  r.output.trace_steps = o.at("trace_steps").get<int64_t>();
  r.output.tensorboard = o.at("tensorboard").get<bool>();
  return r;
}

}  // namespace recipe
}  // namespace bagua
