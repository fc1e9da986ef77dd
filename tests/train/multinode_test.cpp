// `bagua run` across two real network stacks: two nodes as network
// namespaces, each with its own address on a bridge, running `bagua run
// --nnodes 2 --node-rank R --master-addr ADDR` exactly as on two machines,
// with no GLOO_SOCKET_IFNAME (the host name resolves to a loopback address,
// as on a stock Debian host, so Gloo must be told where to bind).
//
// Needs root and iproute2's `ip` (CI has both); skipped otherwise.
#include "comm/network_route.h"
#include "support/python.h"
#include "support/bagua_run.h"
#include "support/namespace_nodes.h"

#include <bagua/errors.h>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace bagua::testing;

using TwoNodes = NamespaceNodes;
using Node = NodeProcess;

TEST(NetworkRoute, TheMasterOnThisMachineIsReachedThroughLoopback) {
  const bagua::comm::NetworkRoute route = bagua::comm::route_to("127.0.0.1", 29500);
  EXPECT_EQ(route.address, "127.0.0.1");
  EXPECT_TRUE(route.loopback);
  EXPECT_FALSE(route.interface.empty());
  EXPECT_NE(bagua::comm::describe_route(route, "127.0.0.1").find("only processes on this machine can connect"),
            std::string::npos);
}

TEST(NetworkRoute, AnUnresolvableMasterIsNamed) {
  try {
    bagua::comm::route_to("no-such-host.invalid", 29500);
    FAIL() << "resolved no-such-host.invalid";
  } catch (const bagua::CommError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve the master address 'no-such-host.invalid'"),
              std::string::npos)
        << e.what();
  }
}

class MultiNodeTest : public RunTest {
 protected:
  void SetUp() override {
    RunTest::SetUp();
    if (auto why = TwoNodes::unavailable(); !why.empty()) GTEST_SKIP() << why;
    try {
      nodes_ = std::make_unique<TwoNodes>();
    } catch (const std::runtime_error& e) {
      // Root without the right to make namespaces (an unprivileged container).
      GTEST_SKIP() << "cannot make network namespaces here: " << e.what();
    }
  }
  void TearDown() override {
    nodes_.reset();
    RunTest::TearDown();
  }

  // A tiny run's recipe file: the first 1024 samples of Fashion-MNIST (so
  // no process spends its time inflating all 60,000), 8 steps of 4 x 16,
  // one thread per worker (so the layouts compare bitwise), a short timeout
  // for failures.
  std::string recipe_file(const std::string& name, const std::string& algorithm) {
    const fs::path images = dir_ / "images.idx", labels = dir_ / "labels.idx";
    if (!fs::exists(images)) {
      first_samples(kFmnist + "train-images-idx3-ubyte.gz", images, 16, 784);
      first_samples(kFmnist + "train-labels-idx1-ubyte.gz", labels, 8, 1);
    }
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\n"
                        << "model: {torchscript: " << kSource << "/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}\n"
                        << "data:\n"
                        << "  train: {format: idx, images: " << images.string() << ", labels: " << labels.string()
                        << "}\n"
                        << "  batch_size: 16\n"
                        << "optimizers: [{type: sgd, lr: 0.05, momentum: 0.9}]\n"
                        << "algorithm: " << algorithm << "\n"
                        << "distributed: {nproc_per_node: 2, timeout_s: 20}\n"
                        << "train: {epochs: 1, max_steps: 8, log_every_steps: 4, threads: 1}\n"
                        << "checkpoint: {every_steps: 8, keep: 1}\n"
                        << "output: {dir: " << (dir_ / name).string() << "}\n";
    return path.string();
  }

  // An IDX file of the first `samples` records of `gz` (header: `header`
  // bytes, the count at bytes 4-7; `record` bytes per sample).
  static constexpr int kSamples = 1024;
  static void first_samples(const std::string& gz, const fs::path& out, int header, int record,
                            int samples = kSamples) {
    const long bytes = header + static_cast<long>(samples) * record;
    ASSERT_EQ(shell("gzip -dc " + gz + " | head -c " + std::to_string(bytes) + " > " + out.string()), 0);
    std::fstream f(out, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    const char count[4] = {0, 0, static_cast<char>(samples >> 8), static_cast<char>(samples & 0xff)};
    f.write(count, 4);
  }

  // IDX files of the first 960 samples (the elastic tests' data set: 960
  // divides among 6 workers and what is left among 4), made once per test.
  fs::path images960() {
    const fs::path images = dir_ / "images960.idx";
    if (!fs::exists(images)) first_samples(kFmnist + "train-images-idx3-ubyte.gz", images, 16, 784, 960);
    return images;
  }
  fs::path labels960() {
    const fs::path labels = dir_ / "labels960.idx";
    if (!fs::exists(labels)) first_samples(kFmnist + "train-labels-idx1-ubyte.gz", labels, 8, 1, 960);
    return labels;
  }

  // Runs `args` as node 0 and node 1 of a 2 x 2 job, into codes_ and outputs_.
  void run_two_nodes(const std::string& args, const std::string& out) {
    const std::string common = args + " --nnodes 2 --nproc-per-node 2 --master-addr " + TwoNodes::address(0) +
                               " --master-port 29500";
    Node n0(nodes_->name(0), common + " --node-rank 0 --set output.dir=" + (dir_ / out / "node0").string(),
            dir_ / (out + "-node0.out"));
    Node n1(nodes_->name(1), common + " --node-rank 1 --set output.dir=" + (dir_ / out / "node1").string(),
            dir_ / (out + "-node1.out"));
    codes_[0] = n0.wait();
    codes_[1] = n1.wait();
    outputs_[0] = n0.output();
    outputs_[1] = n1.output();
  }

  // The weights `algorithm` trains to on two nodes of 2 workers, checking
  // that each node said its workers' Gloo uses eth0.
  std::vector<at::Tensor> two_nodes_train(const std::string& name, const std::string& algorithm) {
    run_two_nodes(recipe_file(name, algorithm), name);
    EXPECT_EQ(codes_[0], 0) << outputs_[0] << "\n---- node 1:\n" << outputs_[1];
    EXPECT_EQ(codes_[1], 0) << outputs_[1];
    for (int node = 0; node < 2; ++node) {
      EXPECT_NE(outputs_[node].find("node " + std::to_string(node) + ": the workers' Gloo uses eth0 (" +
                                    TwoNodes::address(node) + "), the interface that routes to the master " +
                                    TwoNodes::address(0)),
                std::string::npos)
          << outputs_[node];
    }
    EXPECT_NE(outputs_[0].find("final weights identical on all 4 workers"), std::string::npos) << outputs_[0];
    const fs::path model = dir_ / name / "node0" / "model.pt";
    return fs::exists(model) ? model_parameters(model) : std::vector<at::Tensor>{};
  }

  // The weights of the same job on one node of 4 workers (in a namespace
  // too, and with no GLOO_SOCKET_IFNAME either).
  std::vector<at::Tensor> one_node_trains(const std::string& name, const std::string& algorithm) {
    Node one(nodes_->name(0), recipe_file(name, algorithm) + " --nproc-per-node 4", dir_ / (name + ".out"));
    EXPECT_EQ(one.wait(), 0) << one.output();
    const fs::path model = dir_ / name / "model.pt";
    if (!fs::exists(model)) return {};
    auto weights = model_parameters(model);
    EXPECT_GT(max_abs_diff(weights, model_parameters(kSource + "/tests/fixtures/models/mlp_small.pt")), 1e-4)
        << "training moved the weights";
    return weights;
  }

  std::unique_ptr<TwoNodes> nodes_;
  int codes_[2] = {-1, -1};
  std::string outputs_[2];
};

// Flat: the same 4 ranks in the same ring, so the same bits. Hierarchical:
// within each node, then across the two; on one node it is one reduction
// over all 4 in another order, so only closeness is asked.
TEST_F(MultiNodeTest, GradientAllreduceFlatAndHierarchicalOnTwoNodesEqualOneNode) {
  const auto one = one_node_trains("one", "{name: gradient_allreduce}");
  const auto flat = two_nodes_train("flat", "{name: gradient_allreduce}");
  const auto hierarchical = two_nodes_train("hierarchical", "{name: gradient_allreduce, hierarchical: true}");
  ASSERT_FALSE(one.empty() || flat.empty() || hierarchical.empty());
  EXPECT_EQ(max_abs_diff(flat, one), 0.0) << "same ranks, same reduction order: the same bits";
  EXPECT_LE(max_abs_diff(hierarchical, one), 1e-6);
}

TEST_F(MultiNodeTest, ByteGradOnTwoNodesEqualsOneNodeBitwise) {
  const auto one = one_node_trains("one", "{name: bytegrad, hierarchical: false}");
  const auto two = two_nodes_train("two", "{name: bytegrad, hierarchical: false}");
  ASSERT_FALSE(one.empty() || two.empty());
  EXPECT_EQ(max_abs_diff(two, one), 0.0) << "same ranks, same reduction order: the same bits";
}

// Rank 3 (node 1, local rank 1) is killed at step 3: both nodes stop within
// 10 s of it, and each names the node and the rank.
TEST_F(MultiNodeTest, AWorkerKilledOnNodeOneStopsBothNodesNamingIt) {
  const std::string args = recipe_file("kill", "{name: gradient_allreduce}") + " --set train.max_steps=400" +
                           " --nnodes 2 --nproc-per-node 2 --master-addr " + TwoNodes::address(0) +
                           " --master-port 29500";
  const fs::path rank3_log = dir_ / "kill1" / "logs" / "rank-3.log";
  Node n0(nodes_->name(0), args + " --node-rank 0 --set output.dir=" + (dir_ / "kill0").string(), dir_ / "n0.out");
  Node n1(nodes_->name(1), args + " --node-rank 1 --set output.dir=" + (dir_ / "kill1").string(), dir_ / "n1.out",
          "BAGUA_FAULT_AT_STEP=3:3");
  // The kill: when rank 3 says it kills itself (the next thing it does).
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  while (read_file(rank3_log).find("kills itself") == std::string::npos && Clock::now() < give_up &&
         (n0.running() || n1.running())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto killed = Clock::now();
  const int code0 = n0.wait(), code1 = n1.wait();
  const std::string out0 = n0.output(), out1 = n1.output();
  ASSERT_NE(read_file(rank3_log).find("BAGUA_FAULT_AT_STEP: rank 3 kills itself at step 3"), std::string::npos)
      << out1;
  EXPECT_EQ(code0, 3) << out0;
  EXPECT_EQ(code1, 3) << out1;
  for (const auto& ended : {n0.ended(), n1.ended()}) {
    EXPECT_LT(std::chrono::duration<double>(ended - killed).count(), 10.0) << out0 << "\n---- node 1:\n" << out1;
  }
  EXPECT_NE(out1.find("rank 3 (node 1, local rank 1) failed with signal 9 (SIGKILL)"), std::string::npos) << out1;
  EXPECT_NE(out0.find("another node failed (node 1: rank 3 failed with signal 9 (SIGKILL))"), std::string::npos)
      << out0;
}

// Node 1 never starts: node 0's rendezvous ends after distributed.timeout_s
// naming the missing ranks and the node they belong to.
TEST_F(MultiNodeTest, ANodeThatNeverArrivesIsNamedWhenTheRendezvousTimesOut) {
  const std::string args = recipe_file("alone", "{name: gradient_allreduce}") +
                           " --set distributed.timeout_s=3 --nnodes 2 --nproc-per-node 2 --master-addr " +
                           TwoNodes::address(0) + " --master-port 29500 --node-rank 0";
  const auto started = Clock::now();
  Node n0(nodes_->name(0), args, dir_ / "n0.out");
  const int code = n0.wait();
  const double seconds = std::chrono::duration<double>(n0.ended() - started).count();
  const std::string out = n0.output();
  EXPECT_EQ(code, 3) << out;
  EXPECT_NE(out.find("2 of 4 ranks arrived; missing ranks [2, 3] (node 1 never joined, counting 2 ranks per node)"),
            std::string::npos)
      << out;
  EXPECT_LT(seconds, 3 + 10.0) << "ends soon after the rendezvous timeout";
}

// Workers started one by one with torchrun's variables (as torchrun, srun
// or a PyTorchJob start them), no bagua launcher and no GLOO_SOCKET_IFNAME:
// each picks the interface that routes to MASTER_ADDR itself, and local
// rank 0 of each node says which.
TEST_F(MultiNodeTest, TorchrunStyleWorkersOnTwoNodesPickTheirInterface) {
  const std::string args = recipe_file("torchrun", "{name: gradient_allreduce}");
  std::vector<std::unique_ptr<Node>> workers;
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    const std::string env = "RANK=" + std::to_string(rank) + " WORLD_SIZE=4 LOCAL_RANK=" + std::to_string(rank % 2) +
                            " LOCAL_WORLD_SIZE=2 GROUP_RANK=" + std::to_string(node) + " MASTER_ADDR=" +
                            TwoNodes::address(0) + " MASTER_PORT=29500";
    workers.push_back(std::make_unique<Node>(
        nodes_->name(node), args + " --set output.dir=" + (dir_ / ("node" + std::to_string(node))).string(),
        dir_ / ("rank" + std::to_string(rank) + ".out"), env));
  }
  std::string outputs[4];
  for (int rank = 0; rank < 4; ++rank) {
    const int code = workers[rank]->wait();
    outputs[rank] = workers[rank]->output();
    EXPECT_EQ(code, 0) << "rank " << rank << ":\n" << outputs[rank];
  }
  EXPECT_NE(outputs[0].find("final weights identical on all 4 workers"), std::string::npos) << outputs[0];
  for (int rank = 0; rank < 4; ++rank) {
    const int node = rank / 2;
    const std::string line = "bagua: node " + std::to_string(node) + ": Gloo uses eth0 (" + TwoNodes::address(node) +
                             "), the interface that routes to the master " + TwoNodes::address(0);
    EXPECT_EQ(outputs[rank].find(line) != std::string::npos, rank % 2 == 0) << "rank " << rank << ":\n" << outputs[rank];
  }
}

// ---------------------------------------------------------------- torchrun as the engine

// Debian's torchrun (python3-torch), through the wrapper that mends its
// Std.from_str on Python 3.11 (tests/fixtures/torchrun/torchrun.py).
std::string torchrun(const std::string& args) {
  return test_python() + " " + kSource + "/tests/fixtures/torchrun/torchrun.py " + args;
}

bool torchrun_available() { return shell(test_python() + " -c 'import torch.distributed.run'") == 0; }

// PyTorch's own torchrun starts `bagua run` as its worker command on two
// nodes, with its static rendezvous (--master-addr) and with its c10d one
// (--rdzv-endpoint): both make one 4-worker job that trains to the end.
// Each node has its own host name (torchrun's agent tells the workers its
// host's name as MASTER_ADDR), resolved by every node.
TEST_F(MultiNodeTest, TorchrunStartsBaguaRunOnTwoNodesWithStaticAndC10dRendezvous) {
  if (!torchrun_available()) GTEST_SKIP() << "torchrun is not importable from " << test_python();
  nodes_->name_every_node();
  const std::string recipe = recipe_file("torchrun_engine", "{name: gradient_allreduce}");
  for (const std::string rendezvous : {"static", "c10d"}) {
    const fs::path out = dir_ / ("engine-" + rendezvous);
    std::unique_ptr<Node> agents[2];
    for (int node = 0; node < 2; ++node) {
      std::string args = "--nnodes 2 --nproc_per_node 2 --monitor_interval 1";
      if (rendezvous == "static") {
        args += " --node_rank " + std::to_string(node) + " --master_addr " + TwoNodes::host_name(0) +
                " --master_port 29500";
      } else {
        args += " --rdzv_backend c10d --rdzv_endpoint " + TwoNodes::host_name(0) + ":29400 --rdzv_id engine";
      }
      args += " --no_python " + std::string(BAGUA_CLI) + " run " + recipe + " --set output.dir=" + out.string();
      agents[node] = std::make_unique<Node>(nodes_->name(node), torchrun(args),
                                            dir_ / (rendezvous + "-node" + std::to_string(node) + ".out"),
                                            "OMP_NUM_THREADS=1", 0, TwoNodes::host_name(node));
    }
    const int code0 = agents[0]->wait(), code1 = agents[1]->wait();
    const std::string both = agents[0]->output() + "\n---- node 1:\n" + agents[1]->output();
    EXPECT_EQ(code0, 0) << rendezvous << ":\n" << both;
    EXPECT_EQ(code1, 0) << rendezvous << ":\n" << both;
    EXPECT_NE(both.find("final weights identical on all 4 workers"), std::string::npos) << both;
    EXPECT_TRUE(fs::exists(out / "model.pt")) << rendezvous << ":\n" << both;
  }
}

// A Kubeflow TrainJob pod's command is `bagua run recipe.yaml` alone; the
// operator sets torchrun's PET_* variables and nothing else. Two such pods
// make one job; PET_NPROC_PER_NODE=1 beats the recipe's 2 per node.
TEST_F(MultiNodeTest, PetVariablesAloneMakeATwoNodeJob) {
  const std::string args = recipe_file("pet", "{name: gradient_allreduce}");
  std::unique_ptr<Node> pods[2];
  for (int node = 0; node < 2; ++node) {
    const std::string env = "PET_NNODES=2 PET_NPROC_PER_NODE=1 PET_NODE_RANK=" + std::to_string(node) +
                            " PET_MASTER_ADDR=" + TwoNodes::address(0) + " PET_MASTER_PORT=29500 PET_RDZV_ID=pet-job";
    pods[node] = std::make_unique<Node>(nodes_->name(node),
                                        args + " --set output.dir=" + (dir_ / ("pod" + std::to_string(node))).string(),
                                        dir_ / ("pod" + std::to_string(node) + ".out"), env);
  }
  const int code0 = pods[0]->wait(), code1 = pods[1]->wait();
  const std::string out0 = pods[0]->output(), out1 = pods[1]->output();
  ASSERT_EQ(code0, 0) << out0 << "\n---- pod 1:\n" << out1;
  ASSERT_EQ(code1, 0) << out1;
  EXPECT_NE(out0.find("final weights identical on all 2 workers"), std::string::npos) << out0;
  EXPECT_TRUE(fs::exists(dir_ / "pod1" / "logs" / "rank-1.log")) << out1;
  EXPECT_TRUE(fs::exists(dir_ / "pod0" / "model.pt")) << out0;
}

// The container of examples/k8s/indexed-job.yaml as Kubernetes would start
// it in pod `index`: its command and arguments with $(VAR) expanded from its
// environment, and that environment (the completion-index annotation read
// through the fieldRef).
struct PodCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
};

PodCommand pod_command(const fs::path& manifest, int index) {
  YAML::Node job;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(manifest.string())) {
    if (doc["kind"].as<std::string>() == "Job") job = doc;
  }
  if (!job) throw std::runtime_error("no Job in " + manifest.string());
  EXPECT_EQ(job["spec"]["completionMode"].as<std::string>(), "Indexed");
  const YAML::Node container = job["spec"]["template"]["spec"]["containers"][0];
  PodCommand pod;
  for (const YAML::Node& var : container["env"]) {
    const std::string name = var["name"].as<std::string>();
    if (var["value"]) {
      pod.env[name] = var["value"].as<std::string>();
    } else {
      const std::string field = var["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
      EXPECT_EQ(field, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
      pod.env[name] = std::to_string(index);
    }
  }
  auto expand = [&](std::string text) {
    static const std::regex reference(R"(\$\(([A-Za-z_][A-Za-z0-9_]*)\))");
    std::smatch m;
    std::string out;
    while (std::regex_search(text, m, reference)) {
      auto found = pod.env.find(m[1].str());
      out += m.prefix().str() + (found == pod.env.end() ? m[0].str() : found->second);
      text = m.suffix().str();
    }
    return out + text;
  };
  for (const YAML::Node& part : container["command"]) pod.argv.push_back(expand(part.as<std::string>()));
  for (const YAML::Node& part : container["args"]) pod.argv.push_back(expand(part.as<std::string>()));
  return pod;
}

// The example Indexed Job's pods, as two namespaces where the headless
// Service's name resolves to pod 0: both start the right workers (ranks
// 0-1 and 2-3 of 4, meeting at pod 0) and train together.
TEST_F(MultiNodeTest, TheKubernetesIndexedJobManifestMakesACorrectJob) {
  const fs::path manifest = kSource + "/examples/k8s/indexed-job.yaml";
  const std::string recipe_path = recipe_file("k8s", "{name: gradient_allreduce}");
  std::unique_ptr<Node> pods[2];
  for (int index = 0; index < 2; ++index) {
    PodCommand pod = pod_command(manifest, index);
    if (index == 0) nodes_->name_master(pod.env.at("MASTER_ADDR"));
    EXPECT_EQ(pod.env.count("RANK"), 0u) << "with RANK set bagua run would be one worker, not a node's launcher";
    ASSERT_GE(pod.argv.size(), 3u);
    EXPECT_EQ(pod.argv[0], "bagua");
    EXPECT_EQ(pod.argv[1], "run");
    EXPECT_EQ(pod.argv[2], "/config/recipe.yaml") << "the ConfigMap's recipe";
    std::string line = BAGUA_CLI;
    pod.argv[0] = "";  // the binary under test
    pod.argv[2] = recipe_path;
    for (const auto& a : pod.argv) line += a.empty() ? "" : " '" + a + "'";
    line += " --set train.max_steps=4 --set output.dir=" +
            (dir_ / ("pod" + std::to_string(index))).string();
    std::string env;
    for (const auto& [name, value] : pod.env) env += name + "='" + value + "' ";
    pods[index] = std::make_unique<Node>(nodes_->name(index), line, dir_ / ("pod" + std::to_string(index) + ".out"),
                                         env, 0);
  }
  const int code0 = pods[0]->wait(), code1 = pods[1]->wait();
  const std::string out0 = pods[0]->output(), out1 = pods[1]->output();
  ASSERT_EQ(code0, 0) << out0 << "\n---- pod 1:\n" << out1;
  ASSERT_EQ(code1, 0) << out1;
  EXPECT_NE(out0.find("final weights identical on all 4 workers"), std::string::npos) << out0;
  EXPECT_NE(out1.find("node 1: the workers' Gloo uses eth0 (" + TwoNodes::address(1) +
                      "), the interface that routes to the master bagua-train-0.bagua-train"),
            std::string::npos)
      << out1;
  EXPECT_TRUE(fs::exists(dir_ / "pod0" / "model.pt"));
  EXPECT_TRUE(fs::exists(dir_ / "pod1" / "logs" / "rank-2.log")) << "pod 1 runs ranks 2 and 3";
  EXPECT_TRUE(fs::exists(dir_ / "pod1" / "logs" / "rank-3.log"));
}

// The container of examples/k8s/elastic-pytorchjob.yaml as the Kubeflow
// training operator starts it in each worker pod: its command and
// arguments, and the PET_* variables the operator derives from the
// elasticPolicy (pkg/controller.v1/pytorch/elastic.go: the endpoint is pod
// 0's name and its port named pytorchjob-port, 23456 by default).
PodCommand elastic_pod_command(const fs::path& manifest) {
  YAML::Node job;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(manifest.string())) {
    if (doc["kind"].as<std::string>() == "PyTorchJob") job = doc;
  }
  if (!job) throw std::runtime_error("no PyTorchJob in " + manifest.string());
  const YAML::Node policy = job["spec"]["elasticPolicy"];
  const YAML::Node container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
  PodCommand pod;
  int port = 23456;
  for (const YAML::Node& p : container["ports"]) {
    if (p["name"].as<std::string>() == "pytorchjob-port") port = p["containerPort"].as<int>();
  }
  pod.env["PET_RDZV_ENDPOINT"] = job["metadata"]["name"].as<std::string>() + "-worker-0:" + std::to_string(port);
  pod.env["PET_RDZV_BACKEND"] = policy["rdzvBackend"] ? policy["rdzvBackend"].as<std::string>() : "c10d";
  pod.env["PET_NNODES"] = policy["minReplicas"].as<std::string>() + ":" + policy["maxReplicas"].as<std::string>();
  if (policy["maxRestarts"]) pod.env["PET_MAX_RESTARTS"] = policy["maxRestarts"].as<std::string>();
  std::string conf;
  for (const YAML::Node& kv : policy["rdzvConf"]) {
    conf += (conf.empty() ? "" : ",") + kv["key"].as<std::string>() + "=" + kv["value"].as<std::string>();
  }
  if (!conf.empty()) pod.env["PET_RDZV_CONF"] = conf;
  for (const YAML::Node& part : container["command"]) pod.argv.push_back(part.as<std::string>());
  for (const YAML::Node& part : container["args"]) pod.argv.push_back(part.as<std::string>());
  return pod;
}

// An elastic job on three network namespaces, as one of two engines runs
// it (the recipe a small one: 960 samples, 8 per worker, 12 epochs, a
// checkpoint every 4 steps):
//   - kTorchrunPods: examples/k8s/elastic-pytorchjob.yaml's pods, named as
//     the operator names them, each running the container's command line
//     with the operator's PET_* variables (torchrun is Debian's, through
//     the wrapper; `bagua` this build);
//   - kBaguaAgents: bagua run's own agent on each node ("node-K"),
//     --nnodes 2:3 at node 0's address, a last call of 3 s;
//   - kBaguaAgentsAndAStore: the same with the store served by `bagua
//     store` on a fourth machine (start_store()), --rdzv-endpoint there;
//   - kIndexedJobManifest: examples/k8s/elastic-indexed-job.yaml's
//     containers as Kubernetes starts them (the Job's pods, each with its
//     index, and the store's pod), named as Kubernetes names them, with a
//     last call of 3 s added.
class ElasticExample {
 public:
  enum class Engine { kTorchrunPods, kBaguaAgents, kBaguaAgentsAndAStore, kIndexedJobManifest };
  static constexpr int kLastCallSeconds = 3;
  // `images` and `labels`: IDX files of 960 samples.
  ElasticExample(const fs::path& dir, const fs::path& images, const fs::path& labels,
                 Engine engine = Engine::kTorchrunPods)
      : dir_(dir),
        pods_(engine == Engine::kBaguaAgentsAndAStore || engine == Engine::kIndexedJobManifest ? 4 : 3),
        engine_(engine) {
    const fs::path recipe = recipe_ = dir_ / "elastic.yaml";
    std::ofstream(recipe) << "name: elastic\n"
                          << "model: {torchscript: " << kSource << "/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}\n"
                          << "data:\n"
                          << "  train: {format: idx, images: " << images.string() << ", labels: " << labels.string() << "}\n"
                          << "  batch_size: 8\n"
                          << "optimizers: [{type: sgd, lr: 0.02, momentum: 0.9}]\n"
                          << "distributed: {timeout_s: 30}\n"
                          << "train: {epochs: 12, log_every_steps: 10, eval_every: never, threads: 1}\n"
                          << "checkpoint: {every_steps: 4, keep: 2}\n"
                          << "output: {dir: " << out().string() << "}\n";
    env_ = "OMP_NUM_THREADS=1 BAGUA_RECORD_SAMPLES=" + samples().string();
    if (engine_ == Engine::kIndexedJobManifest) {
      pods_.name_every_node(manifest_pod_name);
      return;
    }
    if (engine_ != Engine::kTorchrunPods) {
      pods_.name_every_node();
      const std::string store = engine_ == Engine::kBaguaAgents
                                    ? "--master-addr " + NamespaceNodes::address(0) + " --master-port 29500"
                                    : "--rdzv-endpoint " + NamespaceNodes::address(3) + ":29400";
      command_ = std::string(BAGUA_CLI) + " run " + recipe.string() + " --nnodes 2:3 --nproc-per-node 2 " + store +
                 " --set distributed.rdzv_last_call_s=" + std::to_string(kLastCallSeconds) +
                 " --set distributed.max_restarts=2";
      return;
    }
    const PodCommand pod = elastic_pod_command(kSource + "/examples/k8s/elastic-pytorchjob.yaml");
    EXPECT_EQ(pod.env.at("PET_NNODES"), "2:3");
    pods_.name_every_node(pod_name);
    for (const auto& [name, value] : pod.env) env_ += " " + name + "=" + value;
    for (const std::string& word : pod.argv) {
      if (word == "torchrun") command_ += torchrun("");
      else if (word == "bagua") command_ += std::string(BAGUA_CLI) + " ";
      else if (word == "/config/recipe.yaml") command_ += recipe.string() + " ";
      else command_ += word + " ";
    }
  }
  static std::string pod_name(int pod) { return "bagua-elastic-worker-" + std::to_string(pod); }
  // The Job's pod K is bagua-elastic-K; the store's pod, on the fourth machine, bagua-elastic-store.
  static std::string manifest_pod_name(int pod) {
    return pod == 3 ? "bagua-elastic-store" : "bagua-elastic-" + std::to_string(pod);
  }
  static fs::path manifest() { return kSource + "/examples/k8s/elastic-indexed-job.yaml"; }
  // A pod starts (again, for a replacement: its output goes to a new file).
  std::unique_ptr<Node> start(int pod) {
    const fs::path output = dir_ / ("elastic-pod" + std::to_string(pod) + "-" + std::to_string(started_++) + ".out");
    if (engine_ == Engine::kIndexedJobManifest) {
      const PodCommand k8s = pod_command(manifest(), pod);
      EXPECT_EQ(k8s.env.count("RANK"), 0u);
      std::string line, env = env_;
      for (const std::string& word : k8s.argv) {
        line += word == "bagua" ? std::string(BAGUA_CLI) : word == "/config/recipe.yaml" ? recipe_.string() : word;
        line += " ";
      }
      line += "--set distributed.rdzv_last_call_s=" + std::to_string(kLastCallSeconds);
      for (const auto& [name, value] : k8s.env) env += " " + name + "='" + value + "'";
      return std::make_unique<Node>(pods_.name(pod), line, output, env, 0, manifest_pod_name(pod));
    }
    return std::make_unique<Node>(pods_.name(pod), command_, output, env_, 0,
                                  engine_ == Engine::kTorchrunPods ? pod_name(pod)
                                  : one_host_name_.empty()         ? NamespaceNodes::host_name(pod)
                                                                   : one_host_name_);
  }
  // `bagua store` on the fourth machine (the manifest's store pod's command).
  std::unique_ptr<Node> start_store() {
    std::string line = std::string(BAGUA_CLI) + " store --port 29400";
    if (engine_ == Engine::kIndexedJobManifest) {
      line.clear();
      for (const YAML::Node& doc : YAML::LoadAllFromFile(manifest().string())) {
        if (doc["kind"].as<std::string>() != "Pod") continue;
        for (const YAML::Node& word : doc["spec"]["containers"][0]["command"]) {
          line += (word.as<std::string>() == "bagua" ? std::string(BAGUA_CLI) : word.as<std::string>()) + " ";
        }
      }
      EXPECT_FALSE(line.empty()) << "no store Pod in " << manifest();
    }
    auto store = std::make_unique<Node>(pods_.name(3), line, dir_ / "store.out", "", 0, manifest_pod_name(3));
    for (int i = 0; i < 400 && store->output().find("serving") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return store;
  }
  // Pods 0 and 1 train; pod 2 starts once the job reached `step`, and every
  // pod is waited for: their exit codes (all -1 when the step was never
  // reached) and outputs, each headed "---- pod K:".
  struct Grown {
    std::vector<int> codes;
    std::string all;
  };
  Grown grow_by_one_at(int64_t step) {
    Grown g;
    std::unique_ptr<Node> pods[3];
    for (int pod = 0; pod < 2; ++pod) pods[pod] = start(pod);
    const bool reached = wait_for_step(step);
    if (reached) pods[2] = start(2);
    for (int pod = 0; pod < 3; ++pod) {
      if (!pods[pod]) continue;
      const int code = pods[pod]->wait(std::chrono::seconds(240));
      g.codes.push_back(reached ? code : -1);
      g.all += "\n---- pod " + std::to_string(pod) + ":\n" + pods[pod]->output();
    }
    return g;
  }
  // Adds `args` to every node's command line (bagua's own agents).
  void add_to_command(const std::string& args) { command_ += args; }
  // Every machine started after this has the host name `name` (bagua's own
  // agents): containers on the host's network, two slurmd on one machine.
  void name_every_machine(const std::string& name) { one_host_name_ = name; }
  void kill(int pod) { pods_.kill_node(pod); }
  fs::path out() const { return dir_ / "elastic"; }
  fs::path samples() const { return dir_ / "samples.txt"; }
  // The newest complete checkpoint's step, or -1.
  int64_t newest_step() const {
    int64_t newest = -1;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out() / "checkpoints", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0 && fs::exists(e.path() / "meta.json")) {
        newest = std::max<int64_t>(newest, std::stoll(name.substr(5)));
      }
    }
    return newest;
  }
  bool wait_for_step(int64_t step) const {
    for (int i = 0; i < 2400 && newest_step() < step; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return newest_step() >= step;
  }
  // Over each of the 12 epochs, every one of the 960 samples trained on
  // exactly once (the steps a rollback voided dropped).
  void expect_every_sample_once(const std::string& context) const {
    const auto seen = samples_per_epoch(samples());
    ASSERT_EQ(seen.size(), 12u) << context;
    for (const auto& [epoch, counts] : seen) {
      EXPECT_EQ(counts.size(), 960u) << "epoch " << epoch;
      for (const auto& [i, times] : counts) ASSERT_EQ(times, 1) << "epoch " << epoch << " sample " << i;
    }
  }
  // After a growth: every sample of each epoch trained on, and only the
  // padding of the epoch it grew in (at most 5 samples there) twice.
  void expect_every_sample_at_most_twice_in_the_padding(const std::string& context) const {
    const auto seen = samples_per_epoch(samples());
    ASSERT_EQ(seen.size(), 12u) << context;
    for (const auto& [epoch, counts] : seen) {
      EXPECT_EQ(counts.size(), 960u) << "epoch " << epoch;
      int twice = 0;
      for (const auto& [i, times] : counts) {
        ASSERT_LE(times, 2) << "epoch " << epoch << " sample " << i;
        twice += times == 2;
      }
      EXPECT_LE(twice, 5) << "epoch " << epoch;
    }
  }
  // metrics.jsonl's resume records with "resized".
  std::vector<nlohmann::json> resizes() const {
    std::vector<nlohmann::json> found;
    for (const auto& j : metrics(out() / "metrics.jsonl")) {
      if (j.contains("resized")) found.push_back(j);
    }
    return found;
  }

 private:
  fs::path dir_;
  NamespaceNodes pods_;
  Engine engine_;
  fs::path recipe_;
  std::string command_, env_;
  std::string one_host_name_;
  int started_ = 0;
};

// The elastic example is the test of torchrun as the elastic engine. Pod 2
// dies mid-epoch (every process in its namespace killed); torchrun
// restarts the workers of pods 0 and 1 at WORLD_SIZE 4, and bagua run
// resumes from the newest checkpoint at the new size: it finishes, writes
// model.pt, and over each epoch every training sample is trained on
// exactly once (counted by index, the steps the rollback voided dropped:
// 960 divides among 6 and what is left among 4, so nothing is padded).
TEST_F(MultiNodeTest, TheElasticPyTorchJobExampleLosesAPodAndBaguaResumesAtTheNewWorldSize) {
  if (!torchrun_available()) GTEST_SKIP() << "torchrun is not importable from " << test_python();
  ElasticExample example(dir_, images960(), labels960());
  std::unique_ptr<Node> agents[3];
  for (int pod = 0; pod < 3; ++pod) agents[pod] = example.start(pod);
  // Mid-epoch, past a checkpoint, pod 2 dies.
  ASSERT_TRUE(example.wait_for_step(26)) << agents[0]->output();
  example.kill(2);
  const int code0 = agents[0]->wait(std::chrono::seconds(240)), code1 = agents[1]->wait(std::chrono::seconds(60));
  const std::string both = agents[0]->output() + "\n---- pod 1:\n" + agents[1]->output();
  ASSERT_EQ(code0, 0) << both;
  ASSERT_EQ(code1, 0) << both;
  EXPECT_NE(both.find("resized: 6 workers -> 4"), std::string::npos) << both;
  EXPECT_TRUE(fs::exists(example.out() / "model.pt")) << both;
  // The membership change is one record: torchrun's round, the sizes, the
  // step resumed from.
  const auto changes = example.resizes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({6, 4})) << changes[0];
  EXPECT_GE(changes[0].value("restart", 0), 1) << changes[0];
  EXPECT_GE(changes[0]["step"].get<int64_t>(), 26) << changes[0];
  example.expect_every_sample_once(both);
}

// A pod joins: pods 0 and 1 train at 4 workers; pod 2 starts later.
// torchrun sees it waiting, stops the workers (SIGTERM: bagua checkpoints
// at the next step and exits 75, so no step is lost) and restarts all of
// them at 6 workers, where bagua resumes from that checkpoint. All three
// pods finish; every sample of each epoch is trained on, and only the
// padding of the epoch it grew in (at most 5 samples there) twice.
TEST_F(MultiNodeTest, TheElasticPyTorchJobExampleGrowsWhenAPodJoins) {
  if (!torchrun_available()) GTEST_SKIP() << "torchrun is not importable from " << test_python();
  ElasticExample example(dir_, images960(), labels960());
  const ElasticExample::Grown grown = example.grow_by_one_at(20);
  const std::string& all = grown.all;
  ASSERT_EQ(grown.codes, std::vector<int>({0, 0, 0})) << all;
  EXPECT_NE(all.find("stopped by a signal at step"), std::string::npos) << "a checkpoint at the stop\n" << all;
  EXPECT_NE(all.find("resized: 4 workers -> 6"), std::string::npos) << all;
  EXPECT_EQ(all.find("done again"), std::string::npos) << "nothing rolled back\n" << all;
  EXPECT_TRUE(fs::exists(example.out() / "model.pt")) << all;
  const auto changes = example.resizes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({4, 6})) << changes[0];
  example.expect_every_sample_at_most_twice_in_the_padding(all);
}

// bagua run's own elastic agent (--nnodes 2:3) on three nodes, 2 workers
// each: node 2 dies mid-epoch (every process in its namespace killed). The
// other two find their workers failed and node 2's keep-alive lapsed: a
// lost node, not a failure of theirs, so distributed.max_restarts: 0 does
// not end the job (issue 43, item 7). They meet in round 1 (closed once
// the last call passed with nobody new) and continue at world size 4 from
// the newest checkpoint within the last call + 15 s; they finish, write
// model.pt, and over each epoch every training sample is trained on
// exactly once (counted by index, the rolled-back steps dropped).
TEST_F(MultiNodeTest, BaguasOwnElasticAgentLosesANodeAndTheOthersContinueAtFourWorkers) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kBaguaAgents);
  job.add_to_command(" --set distributed.max_restarts=0");
  std::unique_ptr<Node> agents[3];
  for (int node = 0; node < 3; ++node) agents[node] = job.start(node);
  ASSERT_TRUE(job.wait_for_step(26)) << agents[0]->output();
  job.kill(2);
  const auto killed = Clock::now();
  std::optional<Clock::duration> resumed_after;
  while (!resumed_after && Clock::now() - killed < std::chrono::seconds(60) && agents[0]->running()) {
    if (!job.resizes().empty()) resumed_after = Clock::now() - killed;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int code0 = agents[0]->wait(std::chrono::seconds(240)), code1 = agents[1]->wait(std::chrono::seconds(60));
  const std::string both = agents[0]->output() + "\n---- node 1:\n" + agents[1]->output();
  ASSERT_EQ(code0, 0) << both;
  ASSERT_EQ(code1, 0) << both;
  ASSERT_TRUE(resumed_after) << both;
  // About 11 s here when idle; up to 13.7 s seen on the 2-core CI machine
  // under the suite's load. The bound catches a wait for a timeout or a
  // stop grace (30 s), not a busy machine.
  EXPECT_LE(*resumed_after, std::chrono::seconds(ElasticExample::kLastCallSeconds + 15)) << both;
  EXPECT_NE(both.find("round 0: 3 nodes x 2 workers = 6 workers"), std::string::npos) << both;
  EXPECT_NE(both.find("round 1: 2 nodes x 2 workers = 4 workers"), std::string::npos) << both;
  EXPECT_NE(both.find("resized: 6 workers -> 4"), std::string::npos) << both;
  EXPECT_NE(both.find("round 0 ended as node-2 was lost"), std::string::npos) << both;
  EXPECT_TRUE(fs::exists(job.out() / "model.pt")) << both;
  const auto changes = job.resizes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({6, 4})) << changes[0];
  EXPECT_EQ(changes[0].value("restart", 0), 1) << "the round" << changes[0];
  EXPECT_EQ(changes[0].value("nodes", 0), 2) << changes[0];
  EXPECT_GE(changes[0]["step"].get<int64_t>(), 24) << changes[0];
  job.expect_every_sample_once(both);
}

// bagua run's own agent grows: nodes 0 and 1 of --nnodes 2:3 train at 4
// workers (round 0 closed after the last call); node 2 starts later and
// waits in round 1. The two stop their workers at a step with a checkpoint
// (nothing rolled back), come back, and round 1 closes with 3 nodes, MAX,
// at once; training goes on at 6 workers from that checkpoint. Every
// sample of each epoch is trained on, and only the padding of the epoch
// it grew in (at most 5 samples there) twice.
TEST_F(MultiNodeTest, BaguasOwnElasticAgentGrowsWhenANodeJoins) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kBaguaAgents);
  const ElasticExample::Grown grown = job.grow_by_one_at(20);
  const std::string& all = grown.all;
  ASSERT_EQ(grown.codes, std::vector<int>({0, 0, 0})) << all;
  EXPECT_NE(all.find("round 0: 2 nodes x 2 workers = 4 workers"), std::string::npos) << all;
  EXPECT_NE(all.find("round 0 stopped: node-2 is waiting in round 1"), std::string::npos) << all;
  EXPECT_NE(all.find("round 1: 3 nodes x 2 workers = 6 workers (nodes 0 node-2"), std::string::npos)
      << "node 2 arrived first\n" << all;
  EXPECT_NE(all.find("stopped by a signal at step"), std::string::npos) << "a checkpoint at the stop\n" << all;
  EXPECT_NE(all.find("resized: 4 workers -> 6"), std::string::npos) << all;
  EXPECT_EQ(all.find("done again"), std::string::npos) << "nothing rolled back\n" << all;
  EXPECT_TRUE(fs::exists(job.out() / "model.pt")) << all;
  const auto changes = job.resizes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({4, 6})) << changes[0];
  job.expect_every_sample_at_most_twice_in_the_padding(all);
}

// A joiner arrives first in the next round, so it is rank 0, which picks
// the checkpoint: with checkpoint.resume: never it once moved the job's
// checkpoints aside (and its peers crashed), with a PATH it rolled the job
// back there (issue 43, item 1). Every round after the first resumes from
// the newest checkpoint, on every node.
TEST_F(MultiNodeTest, AJoinerWithResumeNeverContinuesTheJobFromItsNewestCheckpoint) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kBaguaAgents);
  job.add_to_command(" --set checkpoint.resume=never");
  const ElasticExample::Grown grown = job.grow_by_one_at(20);
  const std::string& all = grown.all;
  ASSERT_EQ(grown.codes, std::vector<int>({0, 0, 0})) << all;
  EXPECT_NE(all.find("round 1: 3 nodes x 2 workers = 6 workers (nodes 0 node-2"), std::string::npos)
      << "node 2 arrived first\n" << all;
  EXPECT_NE(all.find("resized: 4 workers -> 6"), std::string::npos) << all;
  EXPECT_EQ(all.find("done again"), std::string::npos) << "nothing rolled back\n" << all;
  EXPECT_EQ(all.find("moved the earlier run's checkpoints"), std::string::npos) << all;
  for (const auto& e : fs::directory_iterator(job.out())) {
    EXPECT_EQ(e.path().filename().string().rfind("checkpoints-before-", 0), std::string::npos)
        << "the job's checkpoints were moved aside: " << e.path();
  }
  job.expect_every_sample_at_most_twice_in_the_padding(all);
}

// Waits (at most 60 s) until `node`'s output holds `text`.
bool said(Node& node, const std::string& text) {
  for (int i = 0; i < 1200 && node.running(); ++i) {
    if (node.output().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return node.output().find(text) != std::string::npos;
}

// A node counted in a round and then killed before it trained (issue 43,
// item 2): once a member for ever, its peers' workers waited for its
// workers out to timeout_s, and the failure was charged to max_restarts (0
// here: the job ended). Its keep-alive lapses instead: the survivors stop
// that round uncounted and train in the next, within the last call + 10 s.
TEST_F(MultiNodeTest, ANodeKilledAfterItWasCountedIsDroppedWithNoRestartCharged) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kBaguaAgents);
  constexpr int kLastCall = 6;
  job.add_to_command(" --set distributed.max_restarts=0 --set train.epochs=2 --set distributed.rdzv_last_call_s=" +
                     std::to_string(kLastCall));
  std::unique_ptr<Node> agents[3];
  agents[0] = job.start(0);
  ASSERT_TRUE(said(*agents[0], "this node arrived 1st")) << agents[0]->output();
  agents[2] = job.start(2);
  ASSERT_TRUE(said(*agents[2], "this node arrived 2nd")) << agents[2]->output();
  job.kill(2);  // counted, and gone
  agents[1] = job.start(1);
  ASSERT_TRUE(said(*agents[0], "round 0: 3 nodes")) << agents[0]->output();
  const auto round0 = Clock::now();
  ASSERT_TRUE(said(*agents[0], "round 1: 2 nodes")) << agents[0]->output();
  const auto resumed_after = Clock::now() - round0;
  const int code0 = agents[0]->wait(std::chrono::seconds(240)), code1 = agents[1]->wait(std::chrono::seconds(60));
  const std::string both = agents[0]->output() + "\n---- node 1:\n" + agents[1]->output();
  EXPECT_EQ(code0, 0) << both;
  EXPECT_EQ(code1, 0) << both;
  EXPECT_LE(resumed_after, std::chrono::seconds(kLastCall + 10)) << both;
  EXPECT_NE(both.find("round 0 stopped: node-2 has left or stopped answering"), std::string::npos) << both;
  EXPECT_EQ(both.find("restarts)"), std::string::npos) << "no restart charged\n" << both;
  EXPECT_TRUE(fs::exists(job.out() / "model.pt")) << both;
}

// Three machines with one host name (containers on the host's network,
// two slurmd on one machine; issue 43, item 8): once they collided on the
// output directory's lock (one exited 2) and were one node to the
// membership. Each agent is its host name and a random suffix: the two
// first train, the third joins, and the job grows to 6 workers as with
// distinct names, every agent holding a lock slot of its own.
TEST_F(MultiNodeTest, ThreeMachinesSharingAHostNameAreThreeNodes) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kBaguaAgents);
  job.name_every_machine("shared");
  const ElasticExample::Grown grown = job.grow_by_one_at(20);
  const std::string& all = grown.all;
  ASSERT_EQ(grown.codes, std::vector<int>({0, 0, 0})) << all;
  EXPECT_NE(all.find("round 0: 2 nodes x 2 workers = 4 workers (nodes 0 shared#"), std::string::npos) << all;
  EXPECT_NE(all.find("round 0 stopped: shared is waiting in round 1"), std::string::npos) << all;
  EXPECT_NE(all.find("round 1: 3 nodes x 2 workers = 6 workers"), std::string::npos) << all;
  EXPECT_NE(all.find("resized: 4 workers -> 6"), std::string::npos) << all;
  EXPECT_EQ(all.find("done again"), std::string::npos) << "nothing rolled back\n" << all;
  for (const std::string lock : {".bagua-run-host-shared.lock", ".bagua-run-host-shared.2.lock",
                                 ".bagua-run-host-shared.3.lock"}) {
    EXPECT_TRUE(fs::exists(job.out() / lock)) << lock;
  }
  job.expect_every_sample_at_most_twice_in_the_padding(all);
}

// The store on a machine of its own (`bagua store`, --rdzv-endpoint): the
// job survives the loss of the node that held rank 0 (node 0 of round 0,
// the first to arrive), and the store stops by itself once the job ended.
TEST_F(MultiNodeTest, AnElasticJobWithAStoreOfItsOwnSurvivesLosingNodeZero) {
  ElasticExample job(dir_, images960(), labels960(),
                     ElasticExample::Engine::kBaguaAgentsAndAStore);
  std::unique_ptr<Node> store = job.start_store();
  std::unique_ptr<Node> agents[3];
  for (int node = 0; node < 3; ++node) agents[node] = job.start(node);
  ASSERT_TRUE(job.wait_for_step(26)) << agents[0]->output();
  int first = -1;  // the machine that is node 0 of round 0
  for (int node = 0; node < 3; ++node) {
    if (agents[node]->output().find("this node is node 0") != std::string::npos) first = node;
  }
  ASSERT_GE(first, 0) << agents[0]->output();
  job.kill(first);
  std::string all;
  for (int node = 0; node < 3; ++node) {
    if (node == first) continue;
    const int code = agents[node]->wait(std::chrono::seconds(240));
    all += "\n---- node " + std::to_string(node) + ":\n" + agents[node]->output();
    EXPECT_EQ(code, 0) << agents[node]->output();
  }
  EXPECT_EQ(store->wait(std::chrono::seconds(30)), 0) << store->output();
  all += "\n---- store:\n" + store->output();
  EXPECT_NE(all.find("round 1: 2 nodes x 2 workers = 4 workers"), std::string::npos) << all;
  EXPECT_EQ(all.find("serves its store"), std::string::npos) << "no agent serves it\n" << all;
  EXPECT_NE(all.find("the elastic job has ended; the store stops"), std::string::npos) << all;
  EXPECT_TRUE(fs::exists(job.out() / "model.pt")) << all;
  const auto changes = job.resizes();
  ASSERT_EQ(changes.size(), 1u) << all;
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({6, 4})) << changes[0];
  job.expect_every_sample_once(all);
}

// examples/k8s/elastic-indexed-job.yaml as Kubernetes runs it: the store's
// pod and the Job's three pods (their command, arguments and environment
// resolved as Kubernetes would). Pod 1 is lost mid-epoch: the other two go
// on at 4 workers; then the Job controller's replacement for index 1
// starts, joins, and the job grows back to 6 workers from a checkpoint
// written at that step. All three pods (the replacement included) and the
// store end with 0; over each epoch every sample is trained on, and only
// the padding of the epoch it grew in twice.
TEST_F(MultiNodeTest, TheElasticIndexedJobExampleLosesAPodAndGrowsBackWhenItIsReplaced) {
  ElasticExample job(dir_, images960(), labels960(), ElasticExample::Engine::kIndexedJobManifest);
  std::unique_ptr<Node> store = job.start_store();
  std::unique_ptr<Node> pods[3];
  for (int pod = 0; pod < 3; ++pod) pods[pod] = job.start(pod);
  ASSERT_TRUE(job.wait_for_step(26)) << pods[0]->output();
  job.kill(1);
  for (int i = 0; i < 1200 && job.resizes().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(job.resizes().size(), 1u) << pods[0]->output();
  pods[1] = job.start(1);  // the Job controller's replacement
  std::string all;
  int codes[3];
  for (int pod = 0; pod < 3; ++pod) {
    codes[pod] = pods[pod]->wait(std::chrono::seconds(240));
    all += "\n---- pod " + std::to_string(pod) + ":\n" + pods[pod]->output();
  }
  EXPECT_EQ(store->wait(std::chrono::seconds(30)), 0) << store->output();
  all += "\n---- store:\n" + store->output();
  for (int pod = 0; pod < 3; ++pod) ASSERT_EQ(codes[pod], 0) << all;
  EXPECT_NE(all.find("bagua-elastic-1 is waiting in round 2"), std::string::npos) << all;
  EXPECT_NE(all.find("round 2: 3 nodes x 2 workers = 6 workers"), std::string::npos) << all;
  EXPECT_TRUE(fs::exists(job.out() / "model.pt")) << all;
  const auto changes = job.resizes();
  ASSERT_EQ(changes.size(), 2u) << all;
  EXPECT_EQ(changes[0]["resized"]["world_size"], nlohmann::json::array({6, 4})) << changes[0];
  EXPECT_EQ(changes[1]["resized"]["world_size"], nlohmann::json::array({4, 6})) << changes[1];
  EXPECT_EQ(changes[1].value("restart", 0), 2) << "round 2" << changes[1];
  job.expect_every_sample_at_most_twice_in_the_padding(all);
}

}  // namespace
