// bagua run: its flags, then either this node's run agent (bagua/run_agent.h:
// launch the workers, restart them when asked) or, when this process
// already is a worker (torchrun/Kubernetes or Slurm variables set), one
// worker (bagua/trainer.h).
#include "command.h"
#include "runtime_commands.h"

#include <bagua/errors.h>
#include <bagua/recipe.h>
#include <bagua/recipe_catalog.h>
#include <bagua/run_agent.h>
#include <bagua/trainer.h>

#include <unistd.h>

#include <cstdlib>

#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <csignal>
#include <string>
#include <vector>

namespace bagua::cli {
namespace {

struct RunFlags {
  std::string recipe;
  std::vector<std::string> overrides;
  std::optional<int> nproc_per_node, node_rank, master_port;
  std::optional<std::string> nnodes;  // N, or MIN:MAX (an elastic job)
  std::optional<std::string> master_addr;
  std::optional<std::string> rdzv_endpoint;  // HOST:PORT: master_addr and master_port
  bool trace = false;
};

int run_as_worker(const Recipe& recipe) {
  TrainOutcome outcome = run_worker(recipe);
  if (!outcome.stopped) return kExitOk;
  // A scheduler's notice (SIGTERM, SIGUSR1) is a preemption; Ctrl-C, or a
  // peer's stop through the vote, an interruption.
  return outcome.stop_signal == SIGTERM || outcome.stop_signal == SIGUSR1 ? kExitPreempted : kExitInterrupted;
}

// This node's agent (bagua/run_agent.h): its workers are this program
// again, as `bagua run RECIPE` with the same overrides (a worker resolves
// RECIPE itself, as this process did).
int run_as_agent(const Recipe& recipe, const RunFlags& flags, const std::vector<std::string>& overrides) {
  RunAgentOptions options;
  options.worker_command = {self_exe(), "run", flags.recipe};
  for (const auto& o : overrides) {
    options.worker_command.push_back("--set");
    options.worker_command.push_back(o);
  }
  options.progress_tty = isatty(STDERR_FILENO) == 1;
  return run_agent(recipe, options);
}

const CommandRegistration kRun{
    "run", runtime_description("run"),
    [](CLI::App& sub) -> CommandRunner {
      auto f = std::make_shared<RunFlags>();
      sub.add_option("recipe", f->recipe,
                     "Recipe file (YAML), catalog name (bagua recipes list), or a run directory to resume or "
                     "re-run exactly what it recorded")->required();
      sub.add_option("--set", f->overrides, "Override a recipe key: key.path=value (value parsed as YAML); repeatable")
          ->type_name("KEY=VALUE")->allow_extra_args(false);
      sub.add_option("--nproc-per-node", f->nproc_per_node, "Workers on this node (distributed.nproc_per_node)");
      sub.add_option("--nnodes", f->nnodes,
                     "Nodes in the job: N, or MIN:MAX for an elastic job whose nodes meet in rounds at "
                     "--master-addr:--master-port and take their ranks in order of arrival (distributed.nnodes)")
          ->type_name("N|MIN:MAX");
      sub.add_option("--node-rank", f->node_rank, "This node's index (distributed.node_rank)");
      sub.add_option("--master-addr", f->master_addr, "Rendezvous host, node 0 (distributed.master_addr)");
      sub.add_option("--master-port", f->master_port,
                     "Rendezvous port (distributed.master_port); on one node a free port unless one is given here or in the recipe");
      sub.add_option("--rdzv-endpoint", f->rdzv_endpoint,
                     "The rendezvous store's HOST:PORT, the same as --master-addr HOST --master-port PORT; for an "
                     "elastic job whose store is served by `bagua store` on a machine of its own")
          ->type_name("HOST:PORT");
      sub.add_flag("--trace", f->trace,
                   "Write a per-step trace of each rank (OUTPUT/trace/rank-N.json, for Perfetto or chrome://tracing); "
                   "same as --set output.trace=true");
      sub.footer(
          "Validates the recipe (as `bagua validate` does) and checks its data, then starts\n"
          "distributed.nproc_per_node workers here. Rank 0's output shows on the terminal; every\n"
          "rank's goes to OUTPUT/logs/rank-N.log. If RANK and WORLD_SIZE (torchrun, a Kubernetes\n"
          "PyTorchJob) or SLURM_PROCID and SLURM_NTASKS are set, this process trains as that one\n"
          "worker instead. Ctrl-C, SIGTERM or SIGUSR1 stops every worker at the next step with a\n"
          "checkpoint (within distributed.stop_grace_s); the same command resumes, at any world size.\n"
          "As a node agent it takes torchrun's PET_* variables as defaults for its flags.\n\n"
          "Exit status: 0 done, 2 invalid recipe or data, output directory or port in use, 3 a worker failed\n"
          "(its rank, cause and last log lines are printed), 4 the training diverged (a NaN or\n"
          "infinite loss or gradient, train.on_nonfinite: stop), 75 preempted (SIGTERM or SIGUSR1:\n"
          "requeue and run again), 130 interrupted (Ctrl-C), 1 internal failure.\n"
          "Workers exit with bagua run: if it is killed, they are too. A worker that stops making\n"
          "progress is named (warnings after distributed.stall_warning_s) and ends the job after\n"
          "distributed.timeout_s; a failure on one node stops the others.\n\n"
          "Examples:\n"
          "  bagua run recipes/fashion-mnist-mlp.yaml\n"
          "  bagua run recipes/fashion-mnist-mlp.yaml --nproc-per-node 4 --set train.epochs=1\n"
          "  bagua run runs/fashion-mnist-mlp   # resume (or re-run) exactly what that run recorded\n"
          "  # two machines; on each, with its own --node-rank (the workers' Gloo binds to the\n"
          "  # interface that routes to --master-addr; GLOO_SOCKET_IFNAME overrides; docs/multi-node.md):\n"
          "  bagua run recipe.yaml --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500\n"
          "  # an elastic job of 2 to 4 machines (the same on each; ranks by arrival):\n"
          "  bagua run recipe.yaml --nnodes 2:4 --master-addr 10.0.0.1 --master-port 29500\n");
      return [f]() -> int {
        if (f->trace) f->overrides.push_back("output.trace=true");  // the workers get it too
        if (f->rdzv_endpoint) {
          if (f->master_addr || f->master_port) {
            std::cerr << "bagua run: --rdzv-endpoint names the master address and port: give it, or "
                         "--master-addr and --master-port, not both\n";
            return kExitInvalidInput;
          }
          try {
            const Endpoint e = parse_endpoint(*f->rdzv_endpoint, /*port_required=*/true);
            f->master_addr = e.host;
            f->master_port = e.port;
          } catch (const InvalidArgument& e) {
            std::cerr << "bagua run: --rdzv-endpoint " << *f->rdzv_endpoint << ": " << e.what() << "\n";
            return kExitInvalidInput;
          }
        }
        StartedAs started = started_as();
        if (started == StartedAs::kSlurmBatchShell) {
          // The batch script of a job of several tasks: as rank 0 of
          // SLURM_NTASKS it once waited out distributed.timeout_s for tasks
          // that never start.
          const char* job_id = std::getenv("SLURM_JOB_ID");
          const std::string tasks = std::getenv("SLURM_NTASKS"), job = job_id ? job_id : "?";
          if (tasks != "1") {
            std::cerr << "bagua run: this is Slurm job " << job << "'s batch script (or salloc shell), not one of its "
                      << tasks << " tasks (no SLURM_STEP_ID): start the workers with srun, one task each: "
                         "srun --kill-on-bad-exit=1 bagua run " << f->recipe << " (docs/multi-node.md, Slurm)\n";
            return kExitInvalidInput;
          }
          // One task: this node's agent, as outside Slurm.
          std::cerr << "bagua run: in Slurm job " << job << "'s batch script with one task: launching this node's "
                       "workers (distributed.nproc_per_node) here\n";
          started = StartedAs::kAgent;
        }
        std::vector<std::string> overrides;
        if (started == StartedAs::kAgent) {
          // torchrun's PET_* defaults (a Kubeflow TrainJob pod sets only
          // these): before --set and the flags, which win.
          std::set<std::string> given;
          if (f->nproc_per_node) given.insert("nproc_per_node");
          if (f->nnodes) given.insert("nnodes");
          if (f->node_rank) given.insert("node_rank");
          if (f->master_addr) given.insert("master_addr");
          if (f->master_port) given.insert("master_port");
          try {
            PetDefaults pet = pet_defaults([](const char* name) { return std::getenv(name); }, given);
            overrides = pet.overrides;
            for (const auto& note : pet.notes) std::cerr << "bagua run: " << note << "\n";
          } catch (const InvalidArgument& e) {
            std::cerr << "bagua run: " << e.what() << "\n";
            return kExitInvalidInput;
          }
        }
        overrides.insert(overrides.end(), f->overrides.begin(), f->overrides.end());
        auto flag = [&](const char* key, const std::string& value) {
          overrides.push_back(std::string("distributed.") + key + "=" + value);
        };
        if (f->nproc_per_node) flag("nproc_per_node", std::to_string(*f->nproc_per_node));
        if (f->nnodes) {
          try {
            flag("nnodes", parse_nnodes(*f->nnodes).recipe_value(f->node_rank.has_value()));
          } catch (const InvalidArgument& e) {
            std::cerr << "bagua run: --nnodes " << *f->nnodes << ": " << e.what() << "\n";
            return kExitInvalidInput;
          }
        }
        if (f->node_rank) flag("node_rank", std::to_string(*f->node_rank));
        if (f->master_addr) flag("master_addr", "'" + *f->master_addr + "'");
        if (f->master_port) flag("master_port", std::to_string(*f->master_port));
        // A run directory (bagua run runs/NAME) runs what it recorded, into itself.
        const RecipeArgument argument = resolve_recipe_argument(f->recipe);
        Recipe recipe;
        try {
          RecipeLoadOptions lo;
          lo.check_files = started != StartedAs::kTorchrunWorker;  // the launcher checked them
          recipe = load_recipe(argument, overrides, lo);
        } catch (const RecipeError& e) {
          return report_invalid_recipe(e, f->recipe);
        }
        if (started != StartedAs::kTorchrunWorker) {
          for (const auto& note : recipe.notes) std::cerr << note.to_string() << " (note)\n";
        }
        if (started == StartedAs::kSlurmTask) {
          adopt_slurm_environment(recipe);
          record_worker_world(recipe);
        }
        if (started == StartedAs::kTorchrunWorker && std::getenv("LOCAL_WORLD_SIZE") == nullptr &&
            recipe.distributed.nproc_per_node > 1 && std::string(std::getenv("RANK")) == "0") {
          // A Kubernetes PyTorchJob (v1) pod without torchrun: WORLD_SIZE is
          // the number of pods, and each pod is one worker.
          std::cerr << "bagua run: note: RANK and WORLD_SIZE are set but LOCAL_WORLD_SIZE is not (a Kubernetes "
                       "PyTorchJob pod, say, rather than torchrun): this process trains as 1 of WORLD_SIZE="
                    << std::getenv("WORLD_SIZE") << " workers, one per pod, and distributed.nproc_per_node ("
                    << recipe.distributed.nproc_per_node
                    << ") is not used. For several workers per pod, let the pod run torchrun with bagua run "
                       "as its worker, or leave RANK unset and give bagua run the nodes (docs/multi-node.md)\n";
        }
        if (started == StartedAs::kAgent) return run_as_agent(recipe, *f, overrides);
        return run_as_worker(recipe);
      };
    }};

}  // namespace
}  // namespace bagua::cli
