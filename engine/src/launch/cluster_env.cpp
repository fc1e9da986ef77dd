// How this process was started: torchrun's and Slurm's variables
// (bagua/run_agent.h).
#include <bagua/run_agent.h>

#include "launch/slurm_hostlist.h"

#include <cstdlib>
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
  if (env_set("SLURM_PROCID") && env_set("SLURM_NTASKS")) return StartedAs::kSlurmTask;
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

}  // namespace bagua
