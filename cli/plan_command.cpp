// bagua plan RECIPE [--set k=v]... [--nproc-per-node N] [--nnodes N] [--json FILE|-] [--no-data]
//
// Predicts a run without starting a worker (bagua/plan.h): the world, the
// parameters and buckets, the bytes each worker sends for the recipe's
// algorithm and every other one, memory per worker, and the steps.
#include "command.h"
#include "runtime_commands.h"

#include <bagua/plan.h>
#include <bagua/recipe.h>
#include <bagua/recipe_catalog.h>

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace bagua::cli {
namespace {

struct PlanFlags {
  std::string recipe;
  std::vector<std::string> overrides;
  std::optional<int> nproc_per_node, nnodes;
  std::string json;
  bool no_data = false;
};

// 1234567 -> "1,234,567".
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// "814,120 B (795.0 KiB)": exact, and readable when large.
std::string bytes(int64_t b) {
  std::string s = grouped(b) + " B";
  if (b < 1024) return s;
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b) / 1024;
  int u = 0;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << v << " " << units[u];
  return s + " (" + o.str() + ")";
}

std::string plural(int64_t n, const std::string& word) {
  const bool sibilant = !word.empty() && word.back() == 's';
  return grouped(n) + " " + word + (n == 1 ? "" : sibilant ? "es" : "s");
}

// {hierarchical: true, ...} -> "hierarchical=true ...".
std::string kwargs_text(const nlohmann::json& kw) {
  std::string out;
  for (const auto& [k, v] : kw.items()) {
    out += (out.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

// "steps 1-200", "steps 201 on", "steps 1, 3, 5, ...".
std::string steps_text(const PlanPhase& p) {
  if (p.per_round) return "per round";
  if (p.every > 1) {
    std::string s = "steps ";
    for (int i = 0; i < 3; ++i) s += std::to_string(p.first_step + i * p.every) + ", ";
    return s + "...";
  }
  if (p.last_step) {
    if (*p.last_step < p.first_step) return "no step";
    return "steps " + std::to_string(p.first_step) + "-" + std::to_string(*p.last_step);
  }
  return p.first_step == 1 ? "every step" : "steps " + std::to_string(p.first_step) + " on";
}

void print_traffic(std::ostream& out, const Plan& plan, const PlanAlgorithm& a) {
  const bool several_nodes = plan.world.nnodes > 1;
  for (const auto& p : a.phases) {
    const std::string when = steps_text(p);
    out << "             " << std::left << std::setw(22) << (p.name + ":") << std::right << std::setw(28)
        << bytes(p.leader.total()) << (when == p.name ? "" : "  " + when) << "\n";
    out << "               " << p.what << "\n";
    const bool split = p.leader.within_node > 0 || p.leader.between_nodes > 0;
    if (split) {
      out << "               node leaders: " << bytes(p.leader.within_node) << " within the node, "
          << bytes(p.leader.between_nodes) << " between nodes"
          << (p.leader.whole_group ? ", " + bytes(p.leader.whole_group) + " over the whole group" : "") << "\n";
      out << "               other workers: " << bytes(p.other.total())
          << (several_nodes ? " (within the node)" : "") << "\n";
    } else if (several_nodes && p.leader.total() > 0) {
      out << "               (a collective over every worker: it crosses nodes)\n";
    }
  }
  if (a.rounds_per_second_at_most) {
    out << "             at most " << *a.rounds_per_second_at_most
        << " rounds per second; per second is not predictable (a round waits sync_interval_ms, then takes as "
           "long as its collectives and the wait for the weights between two steps)\n";
  }
  if (plan.steps.known) {
    out << "           whole run (" << plural(plan.steps.total, "step") << ", rank 0): "
        << bytes(a.bytes_sent(1, plan.steps.total)) << (a.rounds_per_second_at_most ? " plus the rounds" : "")
        << "\n";
  }
  out << "           received: the same as sent (each collective is symmetric as comm_bytes counts it)\n";
}

// Every algorithm of the catalog on this model and world, against the recipe's.
void print_alternatives(std::ostream& out, const Plan& plan) {
  const PlanAlgorithm& a = plan.algorithm;
  out << "every algorithm on this model and world (rank 0, bytes per step once warm-ups are over; * the recipe's)\n";
  const double mine = a.steady_bytes_per_step();
  size_t name_width = 0, kwargs_width = 0;
  for (const auto& alt : plan.alternatives) {
    name_width = std::max(name_width, alt.name.size());
    kwargs_width = std::max(kwargs_width, kwargs_text(alt.kwargs).size());
  }
  for (const auto& alt : plan.alternatives) {
    std::ostringstream line;
    line << "  " << (alt.is_recipe ? "* " : "  ") << std::left << std::setw(static_cast<int>(name_width) + 2)
         << alt.name << std::setw(static_cast<int>(kwargs_width)) << kwargs_text(alt.kwargs) << std::right;
    if (!alt.runnable) {
      line << "  not runnable: " << alt.note;
    } else if (alt.rounds_per_second_at_most) {
      int64_t round = 0;
      for (const auto& ph : alt.phases) {
        if (ph.per_round) round = ph.leader.total();
      }
      line << std::setw(28) << bytes(round) << "  per averaging round";
    } else {
      const double per = alt.steady_bytes_per_step();
      std::ostringstream ratio;
      ratio << std::fixed << std::setprecision(2) << (mine > 0 ? per / mine : 0.0);
      line << std::setw(28) << bytes(static_cast<int64_t>(per + 0.5)) << (mine > 0 ? "  x" + ratio.str() : "");
      if (!alt.note.empty() && !alt.is_recipe) line << "  (" << alt.note << ")";
    }
    out << line.str() << "\n";
  }
  out << "\n";
}

void print_memory(std::ostream& out, const Plan& plan) {
  const PlanAlgorithm& a = plan.algorithm;
  const PlanMemory& m = plan.memory;
  out << "memory     per worker, estimated (activations and LibTorch itself not included)\n";
  auto row = [&](const char* what, int64_t v, const std::string& note = "") {
    out << "             " << std::left << std::setw(20) << what << std::right << std::setw(28) << bytes(v)
        << (note.empty() ? "" : "  " + note) << "\n";
  };
  row("parameters", m.parameters);
  if (m.buffers) row("model buffers", m.buffers);
  row("gradients", m.gradients, a.buckets.flatten && a.buckets.registers.rfind("gradients", 0) == 0
                                    ? "in the flattened buckets"
                                    : "");
  row("optimizer state", m.optimizer_state);
  for (const auto& note : m.optimizer_notes) out << "               " << note << "\n";
  row("algorithm buffers", m.algorithm_buffers);
  row("per-step scratch", m.transient);
  row("data", m.data, plan.steps.known ? "loaded by every worker" : "not loaded (--no-data)");
  row("total", m.total());
  out << "\n";
}

void print_plan(std::ostream& out, const Plan& plan) {
  const PlanWorld& w = plan.world;
  const PlanParameters& p = plan.parameters;
  const PlanAlgorithm& a = plan.algorithm;
  out << "bagua plan " << plan.recipe_name << " (" << plan.recipe_source << ")\n\n";

  out << "world      " << plural(w.nnodes, "node") << " x " << plural(w.nproc_per_node, "process")
      << " = " << plural(w.world_size, "worker") << ", " << w.backend << " on " << (w.device == "cpu" ? "CPUs" : "GPUs")
      << "\n";
  std::string leaders;
  for (size_t i = 0; i < w.node_leaders.size() && i < 16; ++i) leaders += (i ? ", " : "") + std::to_string(w.node_leaders[i]);
  if (w.node_leaders.size() > 16) leaders += ", ...";
  out << "           node leaders (hierarchical algorithms cross nodes through them): rank"
      << (w.node_leaders.size() == 1 ? " " : "s ") << leaders << "\n\n";

  std::string dtypes;
  for (const auto& d : p.dtypes) dtypes += (dtypes.empty() ? "" : ", ") + plan_dtype_name(d.dtype) + " " + grouped(d.numel);
  out << "parameters " << plural(static_cast<int64_t>(p.parameters.size()), "tensor") << ", " << grouped(p.numel)
      << " values, " << bytes(p.bytes) << "; dtypes: " << dtypes << "\n";
  out << "           trainable " << grouped(p.trainable_numel) << ", communicated " << grouped(p.communicated_numel)
      << "\n";
  std::string ignored;
  for (const auto& t : p.parameters) {
    if (t.ignored) ignored += (ignored.empty() ? "" : ", ") + t.name + " (" + grouped(t.numel) + ")";
  }
  out << "           ignored (model.ignore_params): " << (ignored.empty() ? "none" : ignored) << "\n";
  out << "           buffers: "
      << (p.buffers.empty() ? "none" : plural(static_cast<int64_t>(p.buffers.size()), "tensor") + ", " + bytes(p.buffer_bytes))
      << "\n\n";

  const PlanBuckets& b = a.buckets;
  out << "buckets    " << a.name << " registers " << b.registers << ": " << plural(static_cast<int64_t>(b.buckets.size()), "bucket")
      << " (at most " << bytes(b.bucket_bytes) << " each, " << (b.flatten ? "flattened" : "not flattened")
      << (b.alignment > 1 ? ", padded to a multiple of " + std::to_string(b.alignment) + " values" : ", no padding")
      << "), " << bytes(b.bytes) << " in all, padding " << bytes(b.padding_bytes) << "\n";
  if (b.bucket_size_auto) {
    out << "           bucket_size auto: planned at the " << bytes(b.bucket_bytes)
        << " tuning starts from; the size chosen in the first steps changes the buckets, and the padding "
           "with them, not the bytes of the gradients\n";
  }
  for (size_t i = 0; i < b.buckets.size(); ++i) {
    if (i == 12 && b.buckets.size() > 13) {
      out << "             ... (" << b.buckets.size() - 12 << " more)\n";
      break;
    }
    const auto& k = b.buckets[i];
    out << "             " << std::left << std::setw(9) << k.name << std::right << std::setw(9)
        << k.dtype << std::setw(5) << k.tensors.size() << " tensors" << std::setw(14) << grouped(k.numel)
        << " values" << std::setw(30) << bytes(k.bytes) << "  padding " << grouped(k.padded_numel - k.numel)
        << " values\n";
  }
  out << "\n";

  out << "traffic    bytes each worker sends, as comm_bytes in metrics.jsonl counts them: " << a.name << " ("
      << kwargs_text(a.kwargs) << ")\n";
  if (!a.runnable) {
    out << "           not runnable: " << a.note << "\n";
  } else {
    print_traffic(out, plan, a);
    if (!a.note.empty()) out << "           note: " << a.note << "\n";
  }
  out << "\n";

  print_alternatives(out, plan);
  print_memory(out, plan);

  const PlanSteps& s = plan.steps;
  if (s.known) {
    out << "steps      " << grouped(s.train_samples) << " samples / " << plural(w.world_size, "worker") << " = "
        << grouped(s.samples_per_worker) << " per worker per epoch" << (s.drop_last ? " (drop_last)" : "")
        << "; batch " << s.batch_size << " -> " << plural(s.per_epoch, "step") << " per epoch (last batch "
        << s.last_batch << ")\n";
    out << "           " << plural(s.epochs, "epoch")
        << (s.max_steps ? ", max_steps " + std::to_string(*s.max_steps) : std::string()) << ": "
        << plural(s.total, "step") << " in all\n";
    if (s.read_bytes_per_step > 0)
      out << "           streamed: each worker reads " << bytes(s.read_bytes_per_step)
          << " of data files per step (data memory is its file list only)\n";
    out << "           train: " << plan.train_data << "\n";
    if (!plan.eval_data.empty()) out << "           eval: " << plan.eval_data << "\n";
  } else {
    out << "steps      unknown: the data was not loaded (--no-data)\n";
  }
  for (const auto& note : plan.notes) out << "\nnote: " << note << "\n";
}

const CommandRegistration kPlan{
    "plan", runtime_description("plan"),
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<PlanFlags>();
      sub.add_option("recipe", f->recipe, "Recipe file (YAML), catalog name (bagua recipes list), or run directory")
          ->required();
      sub.add_option("--set", f->overrides, "Override a recipe key: key.path=value (value parsed as YAML); repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--nproc-per-node", f->nproc_per_node, "Workers per node (distributed.nproc_per_node)");
      sub.add_option("--nnodes", f->nnodes, "Nodes in the job (distributed.nnodes)");
      sub.add_option("--json", f->json, "Write every figure as JSON to FILE ('-': stdout, instead of the text)")
          ->type_name("FILE");
      sub.add_flag("--no-data", f->no_data, "Do not load the data (steps and data memory stay unknown)");
      sub.footer(
          "Starts no worker: loads the recipe (as `bagua run` does, overrides included), the model's\n"
          "parameter list and the data, and prints what a run would do. Bytes are counted as\n"
          "comm_bytes in metrics.jsonl counts them (docs/algorithms.md has the formulas; docs/plan.md\n"
          "explains the output).\n\n"
          "Exit status: 0 done, 2 invalid recipe, model or data, 1 internal failure.\n\n"
          "Examples:\n"
          "  bagua plan recipes/fashion-mnist-mlp.yaml\n"
          "  bagua plan fashion-mnist-bytegrad --nproc-per-node 8 --nnodes 4   # a catalog name\n"
          "  bagua plan runs/fashion-mnist-mlp   # what that run recorded\n"
          "  bagua plan recipe.yaml --json plan.json\n"
          "  bagua plan recipe.yaml --json - | jq '.algorithms[] | {name, steady_bytes_per_step}'\n");
      return [f]() -> int {
        std::vector<std::string> overrides = f->overrides;
        if (f->nproc_per_node) overrides.push_back("distributed.nproc_per_node=" + std::to_string(*f->nproc_per_node));
        if (f->nnodes) overrides.push_back("distributed.nnodes=" + std::to_string(*f->nnodes));
        Recipe recipe;
        try {
          recipe = load_recipe(resolve_recipe_argument(f->recipe), overrides);
        } catch (const RecipeError& e) {
          return report_invalid_recipe(e, f->recipe);
        }
        for (const auto& note : recipe.notes) std::cerr << note.to_string() << " (note)\n";
        PlanOptions options;
        options.load_data = !f->no_data;
        Plan plan = make_plan(recipe, options);
        if (f->json == "-") {
          std::cout << plan_to_json(plan).dump(2) << "\n";
          return kExitOk;
        }
        print_plan(std::cout, plan);
        if (!f->json.empty()) {
          std::ofstream out(f->json);
          out << plan_to_json(plan).dump(2) << "\n";
          out.close();
          if (!out) {
            std::cerr << "bagua plan: error: cannot write " << f->json << "\n";
            return kExitInvalidInput;
          }
        }
        return kExitOk;
      };
    }};

}  // namespace
}  // namespace bagua::cli
