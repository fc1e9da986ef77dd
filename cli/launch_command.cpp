// bagua launch: run a command as the workers of one node, torchrun-style.
#include "command.h"
#include "runtime_commands.h"

#include <bagua/launch.h>

#include <iostream>
#include <memory>

namespace bagua::cli {
namespace {

const char* const kLaunchFooter = R"(Runs COMMAND once per local rank with torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT, ...). Output lines are prefixed "[rank N] ". When a worker
fails, the others are stopped and a summary goes to stderr.

Put "--" before COMMAND so its own flags are not read as bagua's.

Examples:
  bagua launch --nproc-per-node 4 -- python3 train.py --epochs 3
  # two machines, run on each with its own --node-rank:
  bagua launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 \
      --master-port 29500 --nproc-per-node 8 -- ./train

Exit codes: 0 all workers exited 0, 2 invalid flags, 3 a worker failed,
130 interrupted (SIGINT/SIGTERM).)";

CommandRunner setup_launch(CLI::App& sub) {
  auto options = std::make_shared<LaunchOptions>();
  auto no_prefix = std::make_shared<bool>(false);
  sub.add_option("--nproc-per-node", options->nproc_per_node, "Workers to start on this node")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--nnodes", options->nnodes, "Nodes in the job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub.add_option("--node-rank", options->node_rank, "This node's index, 0 .. nnodes-1")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub.add_option("--master-addr", options->master_addr, "Address of the rendezvous host (node 0)")
      ->capture_default_str();
  sub.add_option("--master-port", options->master_port,
                 "Rendezvous port; 0 picks a free one (single node only)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub.add_option("--log-dir", options->log_dir, "Also write each rank's output to DIR/rank-N.log");
  sub.add_option("--echo-rank", options->echo_rank,
                 "Show only this global rank's output on the terminal (-1: all ranks)")
      ->capture_default_str();
  sub.add_flag("--no-prefix", *no_prefix, "Forward worker output without the \"[rank N] \" prefix");
  sub.add_option("command", options->command, "The command every worker runs, after \"--\"")
      ->required();
  sub.footer(kLaunchFooter);

  return [options, no_prefix]() -> int {
    options->prefix_output = !*no_prefix;
    LocalSupervisor supervisor(*options);
    LaunchResult result = supervisor.run();
    if (result.ok) return kExitOk;
    std::cerr << "bagua launch: " << result.summary() << std::endl;
    return result.interrupted ? kExitInterrupted : kExitWorkerFailed;
  };
}

const CommandRegistration kLaunch{"launch", runtime_description("launch"), setup_launch};

}  // namespace
}  // namespace bagua::cli
