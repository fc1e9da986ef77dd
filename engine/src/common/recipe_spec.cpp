// The spellings of the typed recipe's enumerators, both ways, and how a
// Diagnostic prints (bagua/recipe_spec.h).
#include <bagua/recipe_spec.h>

#include <cstddef>

namespace bagua {

namespace {
const char* const kLossNames[] = {"cross_entropy", "nll", "mse", "l1", "bce_with_logits", "model"};
const char* const kFormatNames[] = {"idx", "csv", "jsonl", "tensors", "tokens", "image_folder"};
const char* const kSamplerNames[] = {"distributed", "load_balancing"};
const char* const kOptimizerNames[] = {"sgd", "adam", "adamw", "rmsprop", "adagrad", "qadam"};
const char* const kSchedulerNames[] = {"constant", "step", "cosine", "linear"};
const char* const kBackendNames[] = {"auto", "gloo", "nccl"};
const char* const kDeviceNames[] = {"auto", "cpu", "cuda"};
const char* const kOnNonFiniteNames[] = {"stop", "skip_step"};
const char* const kEvalMetricNames[] = {"eval_loss", "eval_accuracy", "eval_perplexity"};
const char* const kMetricModeNames[] = {"min", "max"};

template <typename Enum, size_t N>
std::optional<Enum> find_name(std::string_view text, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (text == names[i]) return static_cast<Enum>(i);
  }
  return std::nullopt;
}
}  // namespace

const char* to_string(Loss v) { return kLossNames[static_cast<int>(v)]; }
const char* to_string(DataFormat v) { return kFormatNames[static_cast<int>(v)]; }
const char* to_string(SamplerType v) { return kSamplerNames[static_cast<int>(v)]; }
const char* to_string(OptimizerType v) { return kOptimizerNames[static_cast<int>(v)]; }
const char* to_string(SchedulerType v) { return kSchedulerNames[static_cast<int>(v)]; }
const char* to_string(Backend v) { return kBackendNames[static_cast<int>(v)]; }
const char* to_string(Device v) { return kDeviceNames[static_cast<int>(v)]; }
const char* to_string(OnNonFinite v) { return kOnNonFiniteNames[static_cast<int>(v)]; }
const char* to_string(EvalMetric v) { return kEvalMetricNames[static_cast<int>(v)]; }
const char* to_string(MetricMode v) { return kMetricModeNames[static_cast<int>(v)]; }

bool is_classification(Loss loss) { return loss == Loss::kCrossEntropy || loss == Loss::kNll; }

MetricMode default_mode(EvalMetric metric) {
  return metric == EvalMetric::kEvalAccuracy ? MetricMode::kMax : MetricMode::kMin;
}

template <>
std::optional<Loss> enum_from_string<Loss>(std::string_view t) { return find_name<Loss>(t, kLossNames); }
template <>
std::optional<DataFormat> enum_from_string<DataFormat>(std::string_view t) {
  return find_name<DataFormat>(t, kFormatNames);
}
template <>
std::optional<SamplerType> enum_from_string<SamplerType>(std::string_view t) {
  return find_name<SamplerType>(t, kSamplerNames);
}
template <>
std::optional<OptimizerType> enum_from_string<OptimizerType>(std::string_view t) {
  return find_name<OptimizerType>(t, kOptimizerNames);
}
template <>
std::optional<SchedulerType> enum_from_string<SchedulerType>(std::string_view t) {
  return find_name<SchedulerType>(t, kSchedulerNames);
}
template <>
std::optional<Backend> enum_from_string<Backend>(std::string_view t) { return find_name<Backend>(t, kBackendNames); }
template <>
std::optional<Device> enum_from_string<Device>(std::string_view t) { return find_name<Device>(t, kDeviceNames); }
template <>
std::optional<OnNonFinite> enum_from_string<OnNonFinite>(std::string_view t) {
  return find_name<OnNonFinite>(t, kOnNonFiniteNames);
}

template <>
std::optional<EvalMetric> enum_from_string<EvalMetric>(std::string_view t) {
  return find_name<EvalMetric>(t, kEvalMetricNames);
}
template <>
std::optional<MetricMode> enum_from_string<MetricMode>(std::string_view t) {
  return find_name<MetricMode>(t, kMetricModeNames);
}

std::string Diagnostic::to_string() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  if (!key_path.empty()) out += key_path + ": ";
  return out + message;
}

std::string SourceLocation::to_string() const {
  if (line <= 0 || file.rfind("--set ", 0) == 0) return file;  // an override is its own place
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace bagua
