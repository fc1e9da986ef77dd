// bagua store: an elastic job's rendezvous store on a machine of its own
// (bagua/run_agent.h, serve_elastic_store()).
#include "command.h"
#include "runtime_commands.h"

#include <bagua/recipe_spec.h>
#include <bagua/run_agent.h>

#include <iostream>
#include <memory>

namespace bagua::cli {
namespace {

const CommandRegistration kStore{
    "store", runtime_description("store"),
    [](CLI::App& sub) -> CommandRunner {
      auto port = std::make_shared<int>(DistributedSpec::kDefaultMasterPort);
      sub.add_option("--port", *port, "TCP port to serve on, on every interface")
          ->check(CLI::Range(1, 65535))
          ->capture_default_str();
      auto idle = std::make_shared<int>(60);
      sub.add_option("--idle-s", *idle,
                     "Stop once every node that joined has left or stopped answering for this many seconds "
                     "(a job that ended without marking its end)")
          ->check(CLI::Range(1, 86400))
          ->capture_default_str();
      sub.footer(
          "An elastic job's store (bagua run --nnodes MIN:MAX) normally lives in the bagua run\n"
          "on master_addr's machine, and the job ends if that machine goes. Served here instead,\n"
          "on a machine that outlives the nodes, the job survives the loss of any node: start\n"
          "this first, then every node's bagua run with --rdzv-endpoint THIS_HOST:PORT.\n"
          "It stops by itself a few seconds after the job ends, once every node that joined has\n"
          "left or stopped answering for --idle-s (a replacement that comes within it keeps the\n"
          "job), or on Ctrl-C or SIGTERM; one store per job (start it again for the next).\n\n"
          "Exit status: 0 stopped, 2 the port cannot be served.\n\n"
          "Example:\n"
          "  bagua store --port 29400                                  # on 10.0.0.9\n"
          "  bagua run recipe.yaml --nnodes 2:4 --rdzv-endpoint 10.0.0.9:29400   # on every node\n");
      return [port, idle]() -> int {
        return serve_elastic_store(
            *port, [](const std::string& line) { std::cerr << "bagua store: " << line << "\n"; },
            std::chrono::seconds(*idle));
      };
    }};

}  // namespace
}  // namespace bagua::cli
