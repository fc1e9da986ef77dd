// run_bench_worker(): the measuring loop of `bagua bench` (bagua/bench.h).
#include <bagua/algorithms/registry.h>
#include <bagua/bench.h>
#include <bagua/communication.h>
#include <bagua/data.h>
#include <bagua/distributed.h>
#include <bagua/errors.h>
#include <bagua/recipe.h>

#include "train/components.h"
#include "train/evaluation.h"
#include "train/worker_environment.h"
#include "train/worker_options.h"

#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bagua {

nlohmann::json BenchSpec::to_json() const {
  return {{"recipe", recipe},         {"overrides", overrides},   {"algorithms", algorithms},
          {"steps", steps},           {"warmup", warmup},         {"rounds", rounds},
          {"params", params},         {"batch_size", batch_size}, {"straggler_rank", straggler_rank},
          {"straggler_factor", straggler_factor},                 {"progress_tty", progress_tty}};
}

BenchSpec BenchSpec::from_json(const nlohmann::json& j) {
  BenchSpec s;
  s.recipe = j.at("recipe").get<std::string>();
  s.overrides = j.at("overrides").get<std::vector<std::string>>();
  s.algorithms = j.at("algorithms").get<std::vector<std::string>>();
  s.steps = j.at("steps").get<int64_t>();
  s.warmup = j.at("warmup").get<int64_t>();
  s.rounds = j.at("rounds").get<int64_t>();
  s.params = j.at("params").get<int64_t>();
  s.batch_size = j.at("batch_size").get<int64_t>();
  s.straggler_rank = j.at("straggler_rank").get<int>();
  s.straggler_factor = j.at("straggler_factor").get<double>();
  s.progress_tty = j.at("progress_tty").get<bool>();
  return s;
}

int64_t parse_count(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string suffix = used > 0 ? text.substr(used) : "";
  double scale = 1;
  if (suffix == "k" || suffix == "K") scale = 1e3;
  else if (suffix == "m" || suffix == "M") scale = 1e6;
  else if (suffix == "g" || suffix == "G") scale = 1e9;
  else if (!suffix.empty()) used = 0;
  const double n = value * scale;
  if (used == 0 || !std::isfinite(n) || n < 1 || n > 1e11) {
    throw InvalidArgument("expected a count such as 25M, 300k or 12345 (1 to 100G), got '" + text + "'");
  }
  return static_cast<int64_t>(std::llround(n));
}

WireBytes tcp_bytes_of_this_process() {
  WireBytes total;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return total;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    tcp_info info{};
    socklen_t len = sizeof(info);
    // Fails (ENOTSOCK, EOPNOTSUPP) for everything but TCP sockets.
    if (::getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) continue;
    if (len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) continue;
    total.sent += static_cast<int64_t>(info.tcpi_bytes_acked);
    total.received += static_cast<int64_t>(info.tcpi_bytes_received);
  }
  ::closedir(dir);
  return total;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = static_cast<size_t>(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// The synthetic model: an MLP in -> h -> h -> h -> classes (tanh between: no unit dies, so a frozen second moment has no zeros),
// h chosen so the parameters come to about `params`, as a TorchScript
// module made in memory (nothing to export or ship).
struct Synthetic {
  static constexpr int64_t kInputs = 256, kClasses = 10;
  torch::jit::Module module{"BenchMLP"};
  int64_t hidden = 0;
};

Synthetic make_synthetic(int64_t params, uint64_t seed) {
  Synthetic s;
  // params = in*h + h + 2*(h*h + h) + h*c + c  ->  2h^2 + (in + c + 3)h + c
  const double a = 2, b = Synthetic::kInputs + Synthetic::kClasses + 3;
  const double h = (-b + std::sqrt(b * b + 4 * a * std::max<double>(0, static_cast<double>(params) - 10))) / (2 * a);
  s.hidden = std::max<int64_t>(1, std::llround(h));
  torch::manual_seed(seed);
  const std::vector<int64_t> sizes = {Synthetic::kInputs, s.hidden, s.hidden, s.hidden, Synthetic::kClasses};
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[i]));
    s.module.register_parameter("w" + std::to_string(i), torch::empty({sizes[i + 1], sizes[i]}).uniform_(-bound, bound).requires_grad_(),
                                false);
    s.module.register_parameter("b" + std::to_string(i), torch::empty({sizes[i + 1]}).uniform_(-bound, bound).requires_grad_(), false);
  }
  s.module.define(R"(
def forward(self, x):
    x = torch.tanh(torch.addmm(self.b0, x, self.w0.t()))
    x = torch.tanh(torch.addmm(self.b1, x, self.w1.t()))
    x = torch.tanh(torch.addmm(self.b2, x, self.w2.t()))
    return torch.addmm(self.b3, x, self.w3.t())
)");
  return s;
}

// Learnable random data: labels from a fixed random linear "teacher", the
// same on every rank; inputs differ per rank.
std::vector<Batch> synthetic_batches(int64_t count, int64_t batch, int rank) {
  torch::manual_seed(12345);
  at::Tensor teacher = torch::randn({Synthetic::kInputs, Synthetic::kClasses});
  torch::manual_seed(1000 + rank);
  std::vector<Batch> out;
  for (int64_t i = 0; i < count; ++i) {
    at::Tensor x = torch::randn({batch, Synthetic::kInputs});
    out.push_back({x, x.matmul(teacher).argmax(1)});
  }
  return out;
}

// One thing measured: the local compute reference or an algorithm.
struct Contender {
  explicit Contender(std::string n) : name(std::move(n)) {}
  std::string name;  // "local" or a registry name
  nlohmann::json kwargs = nlohmann::json::object();
  torch::jit::Module module;
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::vector<OptimizerPtr> optimizers;
  std::shared_ptr<BaguaModule> ddp;  // null for local
  bool background = false;           // has background work to pause between rounds
  size_t cursor = 0;                 // next batch
  std::vector<double> step_seconds;  // measured steps
  int64_t counted_bytes = 0;  // ProcessGroup counter over measured steps
  int64_t rounds_communicated = 0;  // rounds in which it sent at least 1% of the weights' bytes
  WireBytes wire;             // TCP over measured rounds
  double first_loss = NAN;    // first warm-up step
  std::vector<double> last_losses;  // the last round's
  // Synchronous algorithms: the ranks agree every step that the loss is
  // finite (async ranks cannot wait for each other).
  bool agreed_check = false;
  bool diverged = false;  // a non-finite loss on some rank: no more steps
  bool tunes_buckets = false;  // bucket_size: auto: the warm-up lasts until the module has chosen
};

// The figures each rank gathers per contender (gather_figures()).
enum Field {
  kMedian, kP10, kP90, kSamplesPerS, kCounted, kWireSent, kWireRecv, kFirstLoss, kLastLoss, kDiverged,
  kRoundsCommunicated, kFields
};

// The most warm-up steps bucket_size: auto may add while the module tunes.
constexpr int64_t kMaxTuningSteps = 200;

class BenchWorker {
 public:
  explicit BenchWorker(const BenchSpec& spec) : spec_(spec) {}
  nlohmann::json run();

 private:
  void setup();
  void build(Contender& c);
  double step(Contender& c, bool measured);
  void warm_up(Contender& c);
  void run_round(int64_t round);
  at::Tensor gather_figures();
  nlohmann::json summary(const at::Tensor& all) const;
  void progress(const std::string& what);

  const BenchSpec& spec_;
  std::optional<Recipe> recipe_;
  int rank_ = 0, world_ = 1, nodes_ = 1;
  at::Device device_{at::kCPU};
  torch::jit::Module base_;
  int64_t params_count_ = 0;
  int64_t batch_ = 0;
  double samples_per_batch_ = 0;  // the pool's mean batch size (variable with sampler.batch_complexity)
  std::vector<Batch> batches_;
  std::string model_description_;
  train::WorkerEnvironment env_;
  ProcessGroupPtr control_;
  std::vector<Contender> contenders_;
  double straggler_sleep_ = 0;  // seconds added to every step of this rank
  int64_t units_done_ = 0, units_total_ = 0;
  FILE* tty_ = nullptr;
};

void BenchWorker::setup() {
  if (!spec_.recipe.empty()) {
    RecipeLoadOptions lo;
    lo.check_files = false;  // the launcher checked them
    recipe_ = load_recipe(spec_.recipe, spec_.overrides, lo);
  }
  // The worker's environment as bagua run builds it: the same device,
  // backend, timeout and threads for the same recipe.
  const at::Device device =
      train::choose_device(recipe_ ? recipe_->train.device : Device::kAuto, train::local_rank_from_env());
  env_ = train::WorkerEnvironment::join(device, train::join_options(recipe_ ? &*recipe_ : nullptr));
  device_ = env_.device;
  rank_ = env_.rank;
  world_ = env_.world;
  nodes_ = std::max(1, world_ / std::max(1, get_local_size()));
  control_ = env_.control;
  if (spec_.progress_tty && rank_ == 0) tty_ = std::fopen("/dev/tty", "w");

  if (recipe_) {
    base_ = train::load_model(recipe_->model.torchscript, at::kCPU);
    batch_ = recipe_->data.batch_size;
    auto data = train::load_training_set(*recipe_, /*through_cache=*/false);
    // The recipe's sampler, so a load-balancing recipe is measured with its
    // own batches: full batches of batch_size, or, with variable-size
    // batches (sampler.batch_complexity), the epoch's first ones.
    const bool variable = recipe_->data.sampler.batch_complexity.has_value();
    std::vector<std::vector<int64_t>> all;
    // A step's batch: train.grad_accum_steps micro-batches of batch_size.
    const int64_t step_batch = batch_ * recipe_->train.grad_accum_steps;
    const auto epoch = make_sampler(data_per_step(recipe_->data, recipe_->train), *data, world_)->batch_list(0, rank_);
    // (Only the pool below is made: a streamed set's epoch can hold millions.)
    for (int64_t i = 0; i < epoch->size() && all.size() < 64; ++i) {
      auto b = epoch->at(i);
      if (variable || static_cast<int64_t>(b.size()) == step_batch) all.push_back(std::move(b));
    }
    if (all.empty()) throw Error("the training data has fewer samples per worker than one batch", true);
    // A pool of batches, cycled: data loading stays out of the figures.
    double samples = 0;
    for (size_t i = 0; i < all.size() && i < 64; ++i) {
      batches_.push_back(data->get_batch(all[i]));
      samples += static_cast<double>(all[i].size());
    }
    samples_per_batch_ = samples / static_cast<double>(batches_.size());
    model_description_ = recipe_->model.torchscript;
  } else {
    Synthetic s = make_synthetic(spec_.params, 0);
    base_ = s.module;
    batch_ = spec_.batch_size;
    batches_ = synthetic_batches(64, batch_, rank_);
    samples_per_batch_ = static_cast<double>(batch_);
    model_description_ = "synthetic MLP " + std::to_string(Synthetic::kInputs) + "-" + std::to_string(s.hidden) + "-" +
                         std::to_string(s.hidden) + "-" + std::to_string(s.hidden) + "-" +
                         std::to_string(Synthetic::kClasses);
  }
  for (auto& b : batches_) {
    b.input = b.input.to(device_);
    if (b.target.defined()) b.target = b.target.to(device_);
  }
  base_.to(device_);
  base_.train();
  for (const auto& p : base_.named_parameters(true)) {
    if (p.value.requires_grad()) params_count_ += p.value.numel();
  }
}

// A contender's unmeasured warm-up: the bench's, or longer where its
// algorithm's own optimizer needs it (RequiredOptimizer::bench_warmup_at_least:
// a second moment frozen after a warm-up of a handful of steps holds
// near-zeros that blow compressed momentum up).
int64_t warmup_of(const AlgorithmDescriptor* algorithm, int64_t warmup) {
  if (algorithm == nullptr || algorithm->traits.required_optimizer.empty()) return warmup;
  return std::max(warmup, algorithm->optimizer.bench_warmup_at_least);
}

// The optimizers a contender trains with: the recipe's (or SGD with
// momentum for the synthetic model); an algorithm that requires its own
// optimizer gets it, with the first one's hyperparameters (lr 0.001 when
// the recipe's is of another type) and a warm-up that ends with the
// bench's, so its measured steps are the algorithm's steady ones; the
// others swap a recipe's algorithm-owned optimizer for its stand-in with
// the same hyperparameters.
std::vector<OptimizerSpec> optimizer_specs(const std::optional<Recipe>& recipe, const AlgorithmDescriptor* algorithm,
                                           int64_t warmup) {
  std::vector<OptimizerSpec> specs;
  if (recipe) {
    specs = recipe->optimizers;
  } else {
    OptimizerSpec sgd;
    sgd.type = OptimizerType::kSgd;
    sgd.lr = 0.05;
    sgd.momentum = 0.9;
    specs.push_back(sgd);
  }
  if (algorithm != nullptr && !algorithm->traits.required_optimizer.empty()) {
    const OptimizerType type = enum_from_string<OptimizerType>(algorithm->traits.required_optimizer).value();
    OptimizerSpec own = specs.front();
    own.type = type;
    own.params = {"*"};
    if (recipe == std::nullopt || recipe->optimizers.front().type != type) own.lr = 0.001;
    // Its switch to the compressed steps (a reset of the buckets) comes at
    // the forward after its warmup_steps-th step: inside the bench's warm-up.
    own.warmup_steps = std::max<int64_t>(1, warmup_of(algorithm, warmup) - 1);
    return {own};
  }
  for (auto& s : specs) {
    if (const AlgorithmDescriptor* owner = find_optimizer_owner(to_string(s.type))) {
      s.type = enum_from_string<OptimizerType>(owner->optimizer.stand_in).value();
    }
  }
  return specs;
}

void BenchWorker::build(Contender& c) {
  {
    // A deep copy; without grad mode, so the copies are leaves again.
    torch::NoGradGuard no_grad;
    c.module = base_.clone();
  }
  c.module.train();
  auto base_params = base_.named_parameters(true).begin();
  for (const auto& p : c.module.named_parameters(true)) {
    p.value.requires_grad_((*base_params).value.requires_grad());
    ++base_params;
    c.params.emplace_back(p.name, p.value);
  }
  const AlgorithmDescriptor* algorithm = c.name == "local" ? nullptr : find_algorithm(c.name);
  auto built = train::build_optimizers(optimizer_specs(recipe_, algorithm, spec_.warmup), c.params);
  c.optimizers = built.optimizers;
  if (algorithm == nullptr) return;
  // The recipe's keyword arguments for its own algorithm, the defaults for
  // the others; hierarchical: auto decided as bagua run would (flat on one
  // node, where hierarchical leaves nothing to do between workers).
  c.kwargs = resolve_kwargs(c.name, recipe_ && recipe_->algorithm.name == c.name ? recipe_->algorithm.kwargs
                                                                                : nlohmann::json::object(),
                            nodes_);
  // As bagua run wraps the model (bucket_size: auto tunes during the
  // warm-up; an algorithm that keeps state per bucket, which cannot tune,
  // is measured at the default size bagua run would refuse to change).
  WithBaguaOptions wopts = recipe_ ? train::with_bagua_options(*recipe_) : WithBaguaOptions{};
  if (algorithm->traits.keeps_bucket_state) wopts.autotune_buckets = false;
  c.tunes_buckets = wopts.autotune_buckets;
  AlgorithmBuildContext context;
  context.optimizers = c.optimizers;
  c.ddp = with_bagua(c.module, c.optimizers, make_algorithm(c.name, c.kwargs, context), wopts);
  c.background = !algorithm->traits.synchronous;
  c.agreed_check = algorithm->traits.synchronous;
  if (c.background) c.ddp->pause_background();
}

// One training step of `c`; returns its seconds. With a recipe, the step
// `bagua run` takes: train.precision's autocast, train.grad_accum_steps
// micro-batches with communication on the last only, and
// train.clip_grad_norm after the gradients are averaged.
double BenchWorker::step(Contender& c, bool measured) {
  const Batch& b = batches_[c.cursor++ % batches_.size()];
  const auto start = Clock::now();
  double excluded = 0;
  for (auto& o : c.optimizers) o->zero_grad();
  const int64_t n = b.input.size(0);
  const int64_t micro = recipe_ && recipe_->train.grad_accum_steps > 1 ? recipe_->data.batch_size : n;
  at::Tensor step_loss;
  for (int64_t from = 0; from < n; from += micro) {
    const int64_t size = std::min(micro, n - from);
    const bool last = from + micro >= n;
    const Batch part = size == n ? b : train::slice_batch(b, from, size);
    if (c.ddp) c.ddp->set_gradient_sync(last);
    at::Tensor loss;
    if (recipe_) {
      loss = train::training_loss(*recipe_, c.module, from == 0 ? c.ddp.get() : nullptr, part);
    } else {
      c10::IValue out = c.ddp ? c.ddp->forward(c.module, {part.input}) : c.module.forward({part.input});
      if (!out.isTensor()) throw Error("the model's forward must return one tensor", true);
      loss = train::compute_loss(Loss::kCrossEntropy, out.toTensor(), part.target);
    }
    const double share = static_cast<double>(size) / static_cast<double>(n);
    step_loss = step_loss.defined() ? step_loss + loss.detach() * share : loss.detach() * share;
    if (last && c.agreed_check) {
      // Before anything of this step is communicated: a non-finite loss on
      // any rank ends this contender on every rank alike (a diverged
      // algorithm is a result, not a crash). Its time is not the step's.
      const auto check_start = Clock::now();
      const bool finite = std::isfinite(step_loss.item<double>());  // NaN in any micro-batch's carries
      at::Tensor bad = torch::tensor({finite ? 0.0 : 1.0}, torch::kDouble);
      allreduce(bad, ReduceOp::MAX, control_);
      excluded += seconds_since(check_start);
      if (bad.item<double>() > 0) {
        c.diverged = true;
        if (c.ddp) c.ddp->set_gradient_sync(true);
        return seconds_since(start) - excluded;
      }
    }
    if (last && straggler_sleep_ > 0) std::this_thread::sleep_for(std::chrono::duration<double>(straggler_sleep_));
    (share == 1.0 ? loss : loss * share).backward();
  }
  if (c.ddp) c.ddp->set_gradient_sync(true);
  if (recipe_ && recipe_->train.clip_grad_norm) (void)train::clip_gradients(c.params, recipe_->train.clip_grad_norm);
  if (c.ddp) {
    c.ddp->step();
  } else {
    for (auto& o : c.optimizers) o->step();
  }
  const double value = step_loss.item<double>();  // also waits for a GPU's stream
  const double seconds = seconds_since(start) - excluded;
  if (std::isnan(c.first_loss)) c.first_loss = value;
  if (measured) c.last_losses.push_back(value);
  return seconds;
}

void BenchWorker::progress(const std::string& what) {
  if (rank_ != 0) return;
  ++units_done_;
  const int width = 30;
  const int filled = static_cast<int>(width * units_done_ / std::max<int64_t>(1, units_total_));
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  if (tty_ != nullptr) {
    std::fprintf(tty_, "\r\033[Kbench [%s] %lld/%lld %s", bar.c_str(), static_cast<long long>(units_done_),
                 static_cast<long long>(units_total_), what.c_str());
    if (units_done_ == units_total_) std::fprintf(tty_, "\r\033[K");
    std::fflush(tty_);
  } else {
    std::fprintf(stderr, "bench [%s] %lld/%lld %s\n", bar.c_str(), static_cast<long long>(units_done_),
                 static_cast<long long>(units_total_), what.c_str());
  }
}

// Unmeasured steps: the local contender first, to calibrate a straggler;
// with bucket_size: auto, until the module has chosen its buckets (so the
// rounds measure the tuned size, as the run trains with it).
void BenchWorker::warm_up(Contender& c) {
  if (c.background) c.ddp->resume_background();
  std::vector<double> seconds;
  const AlgorithmDescriptor* d = find_algorithm(c.name);
  const int64_t warmup = warmup_of(d, spec_.warmup);
  for (int64_t i = 0; (i < warmup || (c.tunes_buckets && !c.ddp->autotune_result() && i < kMaxTuningSteps)) &&
                      !c.diverged;
       ++i) {
    seconds.push_back(step(c, false));
  }
  if (c.background) c.ddp->pause_background();
  if (c.name == "local" && rank_ == spec_.straggler_rank && spec_.straggler_factor > 1) {
    // The first steps pay for first-touch allocations; skip them when there are enough.
    if (seconds.size() > 2) seconds.erase(seconds.begin());
    straggler_sleep_ = (spec_.straggler_factor - 1) * quantile(seconds, 0.5);
  }
  barrier(control_);
  progress("warm-up " + c.name);
}

// One measured round: every contender in turn (the order reversed every
// other round), `steps` steps each.
void BenchWorker::run_round(int64_t round) {
  std::vector<size_t> order(contenders_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = round % 2 == 0 ? i : order.size() - 1 - i;
  for (size_t i : order) {
    Contender& c = contenders_[i];
    if (c.diverged) continue;
    if (round + 1 == spec_.rounds) c.last_losses.clear();
    if (c.background) c.ddp->resume_background();
    barrier(control_);
    const int64_t counted0 = c.ddp ? c.ddp->bytes_sent() : 0;
    const WireBytes wire0 = tcp_bytes_of_this_process();
    for (int64_t s = 0; s < spec_.steps && !c.diverged; ++s) {
      const double t = step(c, true);
      if (!c.diverged) c.step_seconds.push_back(t);
    }
    const WireBytes wire1 = tcp_bytes_of_this_process();
    if (c.background) c.ddp->pause_background();
    const int64_t counted = (c.ddp ? c.ddp->bytes_sent() : 0) - counted0;
    c.counted_bytes += counted;
    // (Async's resume and pause exchange a few bytes of their own.)
    if (counted >= params_count_ / 25) ++c.rounds_communicated;
    c.wire.sent += wire1.sent - wire0.sent;
    c.wire.received += wire1.received - wire0.received;
    barrier(control_);
    std::ostringstream what;
    what << "round " << round + 1 << "/" << spec_.rounds << " " << c.name << ": " << quantile(c.step_seconds, 0.5)
         << " s/step";
    progress(what.str());
  }
}

// Every rank's figures to every rank: one row per contender.
at::Tensor BenchWorker::gather_figures() {
  at::Tensor mine = torch::zeros({static_cast<int64_t>(contenders_.size()), kFields}, torch::kDouble);
  for (size_t i = 0; i < contenders_.size(); ++i) {
    const Contender& c = contenders_[i];
    double last = 0, busy = 0;
    for (double l : c.last_losses) last += l;
    last /= std::max<size_t>(1, c.last_losses.size());
    for (double t : c.step_seconds) busy += t;
    const double steps = static_cast<double>(std::max<size_t>(1, c.step_seconds.size()));
    const double values[kFields] = {quantile(c.step_seconds, 0.5),
                                    quantile(c.step_seconds, 0.1),
                                    quantile(c.step_seconds, 0.9),
                                    busy > 0 ? samples_per_batch_ * steps / busy : 0,
                                    static_cast<double>(c.counted_bytes) / steps,
                                    static_cast<double>(c.wire.sent) / steps,
                                    static_cast<double>(c.wire.received) / steps,
                                    c.first_loss,
                                    c.diverged ? NAN : last,
                                    c.diverged ? 1.0 : 0.0,
                                    static_cast<double>(c.rounds_communicated)};
    for (int f = 0; f < kFields; ++f) mine[static_cast<int64_t>(i)][f] = values[f];
  }
  at::Tensor all = torch::zeros({world_, mine.size(0), kFields}, torch::kDouble);
  allgather(mine, all, control_);
  return all;
}

nlohmann::json BenchWorker::run() {
  setup();
  contenders_.emplace_back("local");
  for (const auto& a : spec_.algorithms) {
    if (find_algorithm(a) == nullptr || !algorithm_implemented(a)) {
      throw InvalidArgument("unknown algorithm '" + a + "'");
    }
    contenders_.emplace_back(a);
  }
  for (auto& c : contenders_) build(c);
  units_total_ = static_cast<int64_t>(contenders_.size()) * (1 + spec_.rounds);

  for (auto& c : contenders_) warm_up(c);
  for (int64_t round = 0; round < spec_.rounds; ++round) run_round(round);

  const at::Tensor all = gather_figures();
  barrier(control_);
  if (tty_ != nullptr) std::fclose(tty_);
  if (rank_ != 0) return nullptr;
  return summary(all);
}

// Rank 0's JSON of every rank's figures (gather_figures()).
nlohmann::json BenchWorker::summary(const at::Tensor& all) const {
  nlohmann::json out;
  out["world_size"] = world_;
  out["nodes"] = nodes_;
  out["device"] = device_.str();
  out["model"] = model_description_;
  out["parameters"] = params_count_;
  out["batch_size"] = batch_;
  out["grad_accum_steps"] = recipe_ ? recipe_->train.grad_accum_steps : 1;
  out["samples_per_step"] = samples_per_batch_;  // per worker: the mean of the batch pool
  out["steps"] = spec_.steps;
  out["warmup"] = spec_.warmup;
  out["rounds"] = spec_.rounds;
  out["threads"] = at::get_num_threads();
  out["contenders"] = nlohmann::json::array();
  for (size_t i = 0; i < contenders_.size(); ++i) {
    nlohmann::json c;
    c["name"] = contenders_[i].name;
    c["kwargs"] = contenders_[i].kwargs;
    // bucket_size: auto's choice (the same on every rank), as the run would train with it.
    const auto& ddp = contenders_[i].ddp;
    if (ddp && ddp->autotune_result()) c["tuned_bucket_bytes"] = ddp->autotune_result()->chosen_bucket_bytes;
    c["ranks"] = nlohmann::json::array();
    for (int r = 0; r < world_; ++r) {
      auto row = all[r][static_cast<int64_t>(i)];
      auto v = [&](int f) { return row[f].item<double>(); };
      c["ranks"].push_back({{"step_time_median_s", v(kMedian)},
                            {"step_time_p10_s", v(kP10)},
                            {"step_time_p90_s", v(kP90)},
                            {"samples_per_s", v(kSamplesPerS)},
                            {"counted_bytes_per_step", v(kCounted)},
                            {"wire_bytes_sent_per_step", v(kWireSent)},
                            {"wire_bytes_received_per_step", v(kWireRecv)},
                            {"first_loss", v(kFirstLoss)},
                            {"last_loss", v(kLastLoss)},
                            {"diverged", v(kDiverged) > 0},
                            {"rounds_communicated", static_cast<int64_t>(v(kRoundsCommunicated))}});
    }
    out["contenders"].push_back(c);
  }
  return out;
}

}  // namespace

nlohmann::json run_bench_worker(const BenchSpec& spec) {
  if (spec.steps < 1 || spec.warmup < 0 || spec.rounds < 1 || spec.batch_size < 1) {
    throw InvalidArgument("bench: steps and rounds must be at least 1, warmup at least 0, batch size at least 1");
  }
  return BenchWorker(spec).run();
}

}  // namespace bagua
