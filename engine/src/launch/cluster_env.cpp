// How this process was started: torchrun's and Slurm's variables
// (bagua/run_agent.h).
#include <bagua/run_agent.h>

#include "launch/slurm_hostlist.h"

#include <bagua/errors.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

namespace bagua {

namespace {
bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}
}  // namespace

StartedAs started_as() {
  if (env_set("RANK") && env_set("WORLD_SIZE")) return StartedAs::kTorchrunWorker;
  if (env_set("SLURM_PROCID") && env_set("SLURM_NTASKS")) {
    // srun sets the step; the batch script (and salloc's shell) has none.
    return env_set("SLURM_STEP_ID") || env_set("SLURM_STEPID") ? StartedAs::kSlurmTask : StartedAs::kSlurmBatchShell;
  }
  return StartedAs::kAgent;
}

std::optional<int> slurm_tasks_on_this_node() {
  const char* layout = std::getenv("SLURM_TASKS_PER_NODE");
  const char* node = std::getenv("SLURM_NODEID");
  if (layout && *layout && node && *node) {
    int want = std::atoi(node), index = 0;
    std::string text = layout;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t comma = text.find(',', pos);
      std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      int count = std::atoi(item.c_str()), repeat = 1;
      if (auto x = item.find("(x"); x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
      if (want < index + repeat) return count;
      index += repeat;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (env_set("SLURM_NTASKS_PER_NODE")) return std::atoi(std::getenv("SLURM_NTASKS_PER_NODE"));
  return std::nullopt;
}

namespace {
// A whole decimal number in [lo, hi], else nullopt.
std::optional<long long> whole_number(const std::string& text, long long lo, long long hi) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const long long v = std::stoll(text);
  if (v < lo || v > hi) return std::nullopt;
  return v;
}
}  // namespace

Endpoint parse_endpoint(const std::string& text, bool port_required) {
  // HOST:PORT, [IPv6]:PORT, or (unless required) HOST alone.
  std::string host = text, p;
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    if (close == std::string::npos) throw InvalidArgument("expected HOST:PORT");
    p = close + 1 < host.size() && host[close + 1] == ':' ? host.substr(close + 2) : "";
    host = host.substr(1, close - 1);
  } else if (const auto colon = host.rfind(':'); colon != std::string::npos) {
    p = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty() || (port_required && p.empty())) throw InvalidArgument("expected HOST:PORT");
  Endpoint e;
  e.host = host;
  if (!p.empty()) {
    const auto n = whole_number(p, 1, 65535);
    if (!n) throw InvalidArgument("expected HOST:PORT with a port 1-65535");
    e.port = static_cast<int>(*n);
  }
  return e;
}

NodeCount parse_nnodes(const std::string& text) {
  const auto colon = text.find(':');
  const std::string lo = text.substr(0, colon), hi = colon == std::string::npos ? lo : text.substr(colon + 1);
  const auto min = whole_number(lo, 1, 999999), max = whole_number(hi, 1, 999999);
  if (!min || !max) throw InvalidArgument("expected a number of nodes N, or an elastic range MIN:MAX");
  if (*min > *max) throw InvalidArgument("expected MIN:MAX with MIN no larger than MAX");
  NodeCount n;
  n.min = static_cast<int>(*min);
  n.max = static_cast<int>(*max);
  n.range = colon != std::string::npos;
  return n;
}

std::string NodeCount::recipe_value(bool node_rank_given) const {
  // N:N with a node rank is N, as torchrun reads it; any other range is an
  // elastic job (a YAML string), whose ranks the rendezvous assigns.
  if (!range || (min == max && node_rank_given)) return std::to_string(min);
  return "'" + std::to_string(min) + ":" + std::to_string(max) + "'";
}

PetDefaults pet_defaults(const std::function<const char*(const char*)>& env, const std::set<std::string>& given) {
  PetDefaults out;
  // The variables behind keys the command line gives are not read at all.
  const std::map<std::string, std::string> key_of = {
      {"PET_NNODES", "nnodes"},           {"PET_NPROC_PER_NODE", "nproc_per_node"}, {"PET_NODE_RANK", "node_rank"},
      {"PET_MASTER_ADDR", "master_addr"}, {"PET_MASTER_PORT", "master_port"},       {"PET_MAX_RESTARTS", "max_restarts"}};
  auto get = [&](const char* name) -> std::optional<std::string> {
    if (auto k = key_of.find(name); k != key_of.end() && given.count(k->second)) return std::nullopt;
    const char* v = env(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  auto set = [&](const std::string& key, const std::string& value) {
    out.overrides.push_back("distributed." + key + "=" + value);
  };
  auto bad = [](const std::string& var, const std::string& value, const std::string& why) {
    return InvalidArgument(var + "=" + value + ": " + why);
  };
  // PET_NNODES: N with PET_NODE_RANK is a fixed job; MIN:MAX, or N with
  // no node rank (neither here nor on the command line), an elastic one
  // whose rendezvous assigns the node ranks.
  const bool rank_given = given.count("node_rank") || get("PET_NODE_RANK");
  if (auto v = get("PET_NNODES")) {
    NodeCount n;
    try {
      n = parse_nnodes(*v);
    } catch (const InvalidArgument& e) {
      throw bad("PET_NNODES", *v, e.what());
    }
    if (!rank_given && n.max > 1) n.range = true;
    set("nnodes", n.recipe_value(rank_given));
  }
  if (auto v = get("PET_NPROC_PER_NODE")) {
    if (auto n = whole_number(*v, 1, 1 << 16)) {
      set("nproc_per_node", std::to_string(*n));
    } else if (*v == "auto" || *v == "cpu" || *v == "gpu") {
      out.notes.push_back("PET_NPROC_PER_NODE=" + *v + ": the recipe's distributed.nproc_per_node is used");
    } else {
      throw bad("PET_NPROC_PER_NODE", *v, "expected a number of workers (or auto, cpu, gpu)");
    }
  }
  if (auto v = get("PET_NODE_RANK")) {
    const auto r = whole_number(*v, 0, 1 << 20);
    if (!r) throw bad("PET_NODE_RANK", *v, "expected this node's index, 0 or more");
    set("node_rank", std::to_string(*r));
  }
  std::optional<std::string> addr = get("PET_MASTER_ADDR"), port = get("PET_MASTER_PORT");
  if (auto v = get("PET_RDZV_ENDPOINT")) {
    Endpoint e;
    try {
      e = parse_endpoint(*v, /*port_required=*/false);
    } catch (const InvalidArgument& error) {
      throw bad("PET_RDZV_ENDPOINT", *v, error.what());
    }
    if (!addr && !given.count("master_addr")) addr = e.host;
    if (!port && e.port && !given.count("master_port")) port = std::to_string(*e.port);
  }
  if (addr) set("master_addr", nlohmann::json(*addr).dump());
  if (port) {
    const auto n = whole_number(*port, 1, 65535);
    if (!n) throw bad(get("PET_MASTER_PORT") ? "PET_MASTER_PORT" : "PET_RDZV_ENDPOINT", *port, "expected a port, 1-65535");
    set("master_port", std::to_string(*n));
  }
  if (auto v = get("PET_MAX_RESTARTS")) {
    const auto n = whole_number(*v, 0, 1 << 20);
    if (!n) throw bad("PET_MAX_RESTARTS", *v, "expected a number of restarts, 0 or more");
    set("max_restarts", std::to_string(*n));
  }
  return out;
}

void adopt_slurm_environment(const Recipe& recipe) {
  auto get = [](const char* n) { return std::string(std::getenv(n)); };
  setenv("RANK", get("SLURM_PROCID").c_str(), 1);
  setenv("WORLD_SIZE", get("SLURM_NTASKS").c_str(), 1);
  if (env_set("SLURM_LOCALID")) setenv("LOCAL_RANK", get("SLURM_LOCALID").c_str(), 1);
  if (auto here = slurm_tasks_on_this_node()) {
    setenv("LOCAL_WORLD_SIZE", std::to_string(*here).c_str(), 1);
  }
  if (env_set("SLURM_NODEID")) setenv("GROUP_RANK", get("SLURM_NODEID").c_str(), 1);
  // Node 0's address: MASTER_ADDR, else the recipe's master_addr when it
  // names one, else the job's first node (SLURM_JOB_NODELIST, expanded
  // here: no scontrol needed). The port: MASTER_PORT, else the recipe's,
  // else one derived from the job id, the same in every task.
  if (!env_set("MASTER_ADDR")) {
    std::string addr = recipe.distributed.master_addr;
    if (addr == DistributedSpec{}.master_addr && env_set("SLURM_JOB_NODELIST")) {
      addr = launch::expand_slurm_hostlist(get("SLURM_JOB_NODELIST")).front();
    }
    setenv("MASTER_ADDR", addr.c_str(), 1);
  }
  if (!env_set("MASTER_PORT")) {
    int port = recipe.distributed.master_port_or_default();
    if (!recipe.distributed.master_port && env_set("SLURM_JOB_ID")) {
      port = launch::slurm_default_port(std::atoll(get("SLURM_JOB_ID").c_str()));
    }
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  }
}

void record_worker_world(Recipe& recipe) {
  if (recipe.distributed.elastic() || !recipe.resolved.is_object()) return;
  auto number = [](const char* name) -> std::optional<long long> {
    const char* v = std::getenv(name);
    return v ? whole_number(v, 0, 1LL << 30) : std::nullopt;
  };
  nlohmann::json& d = recipe.resolved["distributed"];
  if (!d.is_object()) d = nlohmann::json::object();
  const auto world = number("WORLD_SIZE"), local = number("LOCAL_WORLD_SIZE");
  if (world && local && *local > 0 && *world % *local == 0) {
    d["nnodes"] = *world / *local;
    d["nproc_per_node"] = *local;
  }
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) d["master_addr"] = addr;
}

}  // namespace bagua
