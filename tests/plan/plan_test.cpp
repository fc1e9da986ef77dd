// `bagua plan` and make_plan(): the shape of the output, the exit codes, and
// the figures that need no run to check (buckets and their padding, memory,
// steps, ignored parameters).
#include <bagua/algorithms/registry.h>
#include <bagua/plan.h>

#include "plan/plan_support.h"

#include <gtest/gtest.h>

#include <set>

namespace {

using namespace bagua::testing;
using nlohmann::json;

const bagua::PlanAlgorithm* find(const bagua::Plan& plan, const std::string& name, const json& kwargs_subset) {
  for (const auto& a : plan.alternatives) {
    if (a.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : kwargs_subset.items()) match = match && a.kwargs.value(k, json()) == v;
    if (match) return &a;
  }
  return nullptr;
}

TEST_F(PlanTest, JsonHoldsEveryFigure) {
  const std::string recipe = write_recipe("shape", "name: bytegrad, hierarchical: false");
  CliResult r = run_bagua(dir_, "plan " + recipe + " --nproc-per-node 4 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);  // nothing but the JSON on stdout

  EXPECT_EQ(j["recipe"]["name"], "shape");
  EXPECT_EQ(j["world"]["world_size"], 4);
  EXPECT_EQ(j["world"]["nnodes"], 1);
  EXPECT_EQ(j["world"]["nproc_per_node"], 4);
  EXPECT_EQ(j["world"]["node_leaders"], json::array({0}));
  EXPECT_EQ(j["world"]["backend"], "gloo");

  const json& p = j["parameters"];
  EXPECT_EQ(p["count"], 4);
  EXPECT_EQ(p["numel"], 49 * 64 + 64 + 64 * 10 + 10);
  EXPECT_EQ(p["bytes"], 4 * (49 * 64 + 64 + 64 * 10 + 10));
  EXPECT_EQ(p["dtypes"][0]["dtype"], "float32");
  EXPECT_TRUE(p["ignored"].empty());
  for (const auto& t : p["list"]) {
    for (const char* k : {"name", "shape", "dtype", "numel", "bytes", "trainable", "ignored", "optimizer"}) {
      EXPECT_TRUE(t.contains(k)) << k << " in " << t;
    }
    EXPECT_GT(t["bytes"], 0);
  }

  const json& b = j["buckets"];
  for (const char* k : {"registers", "flatten", "bucket_size", "alignment", "count", "bytes", "padding_bytes", "list"}) {
    EXPECT_TRUE(b.contains(k)) << k;
  }
  EXPECT_EQ(b["alignment"], 4) << "bytegrad pads buckets to a multiple of the world size";
  EXPECT_GT(b["count"], 0);

  const json& a = j["algorithm"];
  EXPECT_EQ(a["name"], "bytegrad");
  EXPECT_TRUE(a["is_recipe"]);
  EXPECT_GT(a["steady_bytes_per_step"], 0);
  EXPECT_GT(a["run_bytes"], 0);
  ASSERT_FALSE(a["phases"].empty());
  for (const auto& ph : a["phases"]) {
    EXPECT_GT(ph["sent"]["node_leader"]["total"], 0);
    EXPECT_EQ(ph["received"], ph["sent"]);
  }

  // Every algorithm of the registry is compared.
  std::set<std::string> names;
  for (const auto& alt : j["algorithms"]) names.insert(alt["name"].get<std::string>());
  for (const auto& d : bagua::algorithm_catalog()) EXPECT_TRUE(names.count(d.name)) << d.name;
  for (const auto& alt : j["algorithms"]) {
    if (!alt["runnable"]) continue;
    if (alt["name"] == "async") {
      EXPECT_GT(alt["rounds_per_second_at_most"], 0);
      EXPECT_TRUE(alt["bytes_per_second"].is_null()) << "async's bytes per second is not predictable";
    } else {
      EXPECT_GT(alt["steady_bytes_per_step"], 0) << alt["name"] << " " << alt["kwargs"];
    }
  }

  const json& m = j["memory"];
  for (const char* k : {"parameters", "gradients", "optimizer_state", "algorithm_buffers", "data", "total"}) {
    EXPECT_GT(m[k], 0) << k;
  }
  EXPECT_EQ(m["optimizer_state"], p["bytes"]) << "sgd with momentum keeps one buffer per parameter";
  EXPECT_EQ(m["data"], 3000 * (49 * 4 + 8)) << "3,000 rows of 49 float32 inputs and an int64 label";

  const json& s = j["steps"];
  EXPECT_EQ(s["train_samples"], 3000);
  EXPECT_EQ(s["samples_per_worker"], 750);
  EXPECT_EQ(s["per_epoch"], 47);  // ceil(750 / 16)
  EXPECT_EQ(s["last_batch"], 750 - 46 * 16);
  EXPECT_EQ(s["total"], 12) << "max_steps";

  // train.global_batch_size 50 over 4 workers: steps of 50 (ranks of 13,
  // 13, 12, 12), 60 of them; rank 0's last batch holds 13 of the 3,000 -
  // 59 x 50 = 50 left.
  CliResult g = run_bagua(dir_, "plan " + recipe + " --nproc-per-node 4 --set train.global_batch_size=50 --json -");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const json gs = json::parse(g.out)["steps"];
  EXPECT_EQ(gs["batch_size"], 13);
  EXPECT_EQ(gs["per_epoch"], 60);
  EXPECT_EQ(gs["last_batch"], 13);
}

TEST_F(PlanTest, TextOutputAndJsonFile) {
  const std::string recipe = write_recipe("text", "name: gradient_allreduce");
  const fs::path json_path = dir_ / "plan.json";
  CliResult r = run_bagua(dir_, "plan " + recipe + " --json " + json_path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* section : {"world ", "node leaders", "parameters ", "buckets ", "traffic ", "every algorithm",
                              "memory ", "steps "}) {
    EXPECT_NE(r.out.find(section), std::string::npos) << section << " in\n" << r.out;
  }
  for (const auto& d : bagua::algorithm_catalog()) EXPECT_NE(r.out.find(d.name), std::string::npos) << d.name;
  json j = json::parse(slurp(json_path.string()));
  EXPECT_EQ(j["algorithm"]["name"], "gradient_allreduce");
}

TEST_F(PlanTest, AnInvalidRecipeExits2WithItsDiagnostics) {
  const std::string recipe = write_recipe("bad", "name: gradient_allreduce", "{type: sgd, lr: -1}",
                                          "unknown_key: 3\n");
  CliResult r = run_bagua(dir_, "plan " + recipe);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(recipe + ":"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown_key"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optimizers[0].lr"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("invalid recipe, 2 errors"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;

  // A bad override is reported as bagua run reports it.
  CliResult o = run_bagua(dir_, "plan " + write_recipe("ok", "name: gradient_allreduce") + " --set train.epochs=0");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("train.epochs"), std::string::npos) << o.err;

  // An ignore_params glob that matches nothing would stop bagua run: so does plan.
  CliResult g = run_bagua(dir_, "plan " + write_recipe("glob", "name: gradient_allreduce", "{type: sgd, lr: 0.1}") +
                                    " --set 'model.ignore_params=[\"nothing.*\"]'");
  EXPECT_EQ(g.exit_code, 2);
  EXPECT_NE(g.err.find("nothing.*"), std::string::npos) << g.err;
}

// A catalog name and a run directory plan as a recipe file does, resolved as
// bagua run resolves them: a run directory plans what its run recorded.
TEST_F(PlanTest, TakesACatalogNameAndARunDirectory) {
  CliResult by_name = run_bagua(dir_, "plan fashion-thumbnails-csv --no-data --json -");
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  CliResult by_file = run_bagua(dir_, "plan " + kSourceDir + "/recipes/fashion-thumbnails-csv.yaml --no-data --json -");
  ASSERT_EQ(by_file.exit_code, 0) << by_file.err;
  const json named = json::parse(by_name.out), filed = json::parse(by_file.out);
  EXPECT_EQ(named["recipe"]["name"], "fashion-thumbnails-csv");
  EXPECT_EQ(named["recipe"]["source"], filed["recipe"]["source"]);
  EXPECT_EQ(named["parameters"], filed["parameters"]);
  EXPECT_EQ(named["algorithm"], filed["algorithm"]);

  const std::string recipe = write_recipe("recorded", "name: gradient_allreduce");
  CliResult run = run_bagua(dir_, "run " + recipe + " --nproc-per-node 1 --set train.max_steps=2 --set data.batch_size=8");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  CliResult by_dir = run_bagua(dir_, "plan " + (dir_ / "recorded").string() + " --nproc-per-node 4 --json -");
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.err;
  const json recorded = json::parse(by_dir.out);
  EXPECT_EQ(recorded["recipe"]["name"], "recorded");
  EXPECT_EQ(recorded["recipe"]["source"], (dir_ / "recorded/recipe.resolved.yaml").string());
  EXPECT_EQ(recorded["world"]["world_size"], 4);
  EXPECT_EQ(recorded["steps"]["batch_size"], 8) << "the batch size the run recorded";
  EXPECT_EQ(recorded["steps"]["max_steps"], 2);
}

// The buckets are the library's make_buckets() over the registration order
// (last layer first), with each algorithm's padding. With a 4 KiB bucket the
// MLP's tensors split as [layers.2.bias, layers.2.weight, layers.0.bias]
// (714 values) and [layers.0.weight] (3,136 values); 714 is not a multiple
// of 4, so bytegrad and qadam pad the first to 716 on 4 workers.
TEST_F(PlanTest, BucketsAndTheirPaddingPerAlgorithm) {
  bagua::Recipe recipe = bagua::load_recipe(write_recipe("pad", "name: gradient_allreduce, bucket_size: 4KiB"),
                                            {"distributed.nproc_per_node=4"});
  bagua::PlanOptions options;
  options.load_data = false;
  bagua::Plan plan = bagua::make_plan(recipe, options);

  const auto& b = plan.algorithm.buckets;
  ASSERT_EQ(b.buckets.size(), 2u);
  EXPECT_EQ(b.buckets[0].tensors, (std::vector<std::string>{"layers.2.bias", "layers.2.weight", "layers.0.bias"}));
  EXPECT_EQ(b.buckets[0].numel, 714);
  EXPECT_EQ(b.buckets[0].padded_numel, 714) << "gradient_allreduce does not pad";
  EXPECT_EQ(b.buckets[1].tensors, (std::vector<std::string>{"layers.0.weight"}));
  EXPECT_EQ(b.buckets[1].padded_numel, 3136);

  for (const char* name : {"bytegrad", "qadam"}) {
    const bagua::PlanAlgorithm* a = find(plan, name, json::object());
    ASSERT_NE(a, nullptr) << name;
    ASSERT_EQ(a->buckets.buckets.size(), 2u) << name;
    EXPECT_EQ(a->buckets.alignment, 4) << name;
    EXPECT_EQ(a->buckets.buckets[0].padded_numel, 716) << name;
    EXPECT_EQ(a->buckets.buckets[0].padding_bytes, 8) << name;
    EXPECT_EQ(a->buckets.buckets[1].padded_numel, 3136) << name;
  }
  // qadam's warm-up allreduces the padded buckets: 2 (n-1)/n of (716 + 3136) float32.
  const bagua::PlanAlgorithm* q = find(plan, "qadam", {{"hierarchical", false}});
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->phases.at(0).leader.total(), 716 * 4 * 3 / 2 + 3136 * 4 * 3 / 2);
  // bytegrad, flat: per bucket 2 (n-1) chunk strides, a stride 32 + the chunk rounded up to 32.
  const bagua::PlanAlgorithm* g = find(plan, "bytegrad", {{"hierarchical", false}});
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->phases.at(0).leader.total(), 2 * 3 * (32 + 192) + 2 * 3 * (32 + 800));
  // Weight-sending algorithms never flatten and never pad.
  const bagua::PlanAlgorithm* d = find(plan, "decentralized", {{"hierarchical", false}});
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE(d->buckets.flatten);
  EXPECT_EQ(d->buckets.padding_bytes, 0);
}

TEST_F(PlanTest, HierarchicalTrafficIsSplitByWhereItGoes) {
  bagua::Recipe recipe = bagua::load_recipe(write_recipe("hier", "name: gradient_allreduce, hierarchical: true"),
                                            {"distributed.nproc_per_node=4", "distributed.nnodes=3"});
  bagua::PlanOptions options;
  options.load_data = false;
  bagua::Plan plan = bagua::make_plan(recipe, options);
  EXPECT_EQ(plan.world.world_size, 12);
  EXPECT_EQ(plan.world.node_leaders, (std::vector<int>{0, 4, 8}));
  const auto& ph = plan.algorithm.phases.at(0);
  const int64_t bytes = 3850 * 4;
  // Reduce and broadcast in a node of 4: 3/4 each; allreduce among 3 leaders: 4/3.
  EXPECT_EQ(ph.leader.within_node, 2 * (bytes * 3 / 4));
  EXPECT_EQ(ph.leader.between_nodes, (bytes * 4 + 1) / 3);
  EXPECT_EQ(ph.leader.whole_group, 0);
  EXPECT_EQ(ph.other.within_node, ph.leader.within_node);
  EXPECT_EQ(ph.other.between_nodes, 0) << "only node leaders cross nodes";

  // shift_one needs an even number of peers: 3 nodes, hierarchical, cannot.
  const bagua::PlanAlgorithm* s = find(plan, "decentralized", {{"hierarchical", true}, {"peer_selection_mode", "shift_one"}});
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->runnable);
  EXPECT_NE(s->note.find("even"), std::string::npos) << s->note;
  // Flat, 12 peers: one peer's worth of weights.
  const bagua::PlanAlgorithm* f = find(plan, "decentralized", {{"hierarchical", false}, {"peer_selection_mode", "shift_one"}});
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(f->runnable);
  EXPECT_EQ(f->phases.at(0).leader.total(), bytes);
}

TEST_F(PlanTest, IgnoredParametersLeaveTheBucketsButNotTheModel) {
  bagua::Recipe recipe = bagua::load_recipe(write_recipe("ignore", "name: gradient_allreduce"),
                                            {"model.ignore_params=[\"layers.2.*\"]"});
  bagua::Plan plan = bagua::make_plan(recipe);
  EXPECT_EQ(plan.parameters.numel, 3850);
  EXPECT_EQ(plan.parameters.communicated_numel, 49 * 64 + 64);
  for (const auto& t : plan.parameters.parameters) EXPECT_EQ(t.ignored, t.name.rfind("layers.2.", 0) == 0) << t.name;
  int64_t in_buckets = 0;
  for (const auto& b : plan.algorithm.buckets.buckets) in_buckets += b.numel;
  EXPECT_EQ(in_buckets, 49 * 64 + 64);
  EXPECT_EQ(plan.algorithm.phases.at(0).leader.total(), (49 * 64 + 64) * 4);  // 2 (n-1)/n = 1 on 2 workers
}

TEST_F(PlanTest, OptimizerStateByType) {
  auto state_of = [&](const std::string& optimizer) {
    bagua::Recipe recipe = bagua::load_recipe(write_recipe("opt", "name: gradient_allreduce", optimizer));
    bagua::PlanOptions options;
    options.load_data = false;
    return bagua::make_plan(recipe, options).memory.optimizer_state;
  };
  const int64_t p = 3850 * 4;
  EXPECT_EQ(state_of("{type: sgd, lr: 0.1}"), 0);
  EXPECT_EQ(state_of("{type: sgd, lr: 0.1, momentum: 0.9}"), p);
  EXPECT_EQ(state_of("{type: adam, lr: 0.001}"), 2 * p);
  EXPECT_EQ(state_of("{type: adamw, lr: 0.001, amsgrad: true}"), 3 * p);
  EXPECT_EQ(state_of("{type: rmsprop, lr: 0.001, momentum: 0.9, centered: true}"), 3 * p);
  EXPECT_EQ(state_of("{type: adagrad, lr: 0.01}"), p);
  // Two optimizers, each over its own parameters.
  EXPECT_EQ(state_of("{type: adam, lr: 0.001, params: ['layers.0.*']}, {type: sgd, lr: 0.1}"), 2 * (49 * 64 + 64) * 4);
}

TEST_F(PlanTest, StepsFollowTheSampler) {
  // 3,000 samples on 7 workers: drop_last keeps 428 each, else 429 (padded).
  auto steps_of = [&](bool drop_last, int batch) {
    bagua::Recipe recipe = bagua::load_recipe(
        write_recipe("steps", "name: gradient_allreduce"),
        {"distributed.nproc_per_node=7", "data.sampler.drop_last=" + std::string(drop_last ? "true" : "false"),
         "data.batch_size=" + std::to_string(batch), "train.epochs=3", "train.max_steps=1000"});
    return bagua::make_plan(recipe).steps;
  };
  auto kept = steps_of(true, 100);
  EXPECT_EQ(kept.samples_per_worker, 428);
  EXPECT_EQ(kept.per_epoch, 5);
  EXPECT_EQ(kept.last_batch, 28);
  EXPECT_EQ(kept.total, 15);
  auto padded = steps_of(false, 429);
  EXPECT_EQ(padded.samples_per_worker, 429);
  EXPECT_EQ(padded.per_epoch, 1);
  EXPECT_EQ(padded.total, 3);
}

// The data each worker holds, as its format keeps it: IDX pixels as bytes
// (a quarter of the float32 batches made from them), labels as int64.
TEST_F(PlanTest, DataMemoryIsWhatTheLoadedSetHolds) {
  const std::string fmnist = "/usr/share/datasets/fashion-mnist/";
  bagua::Recipe recipe = bagua::load_recipe(
      write_recipe("idx", "name: gradient_allreduce"),
      {"model.torchscript=" + kSourceDir + "/tests/fixtures/models/mlp_small.pt",
       "data.train={format: idx, images: " + fmnist + "t10k-images-idx3-ubyte.gz, labels: " + fmnist +
           "t10k-labels-idx1-ubyte.gz}"});
  bagua::Plan plan = bagua::make_plan(recipe);
  EXPECT_EQ(plan.steps.train_samples, 10000);
  EXPECT_EQ(plan.memory.data, 10000 * (28 * 28 + 8));
  EXPECT_EQ(plan.parameters.numel, 784 * 32 + 32 + 32 * 10 + 10);
}

TEST_F(PlanTest, WithoutDataTheStepsAreUnknown) {
  const std::string recipe = write_recipe("nodata", "name: async, warmup_steps: 10");
  CliResult r = run_bagua(dir_, "plan " + recipe + " --no-data --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_FALSE(j["steps"]["known"]);
  EXPECT_EQ(j["memory"]["data"], 0);
  EXPECT_TRUE(j["algorithm"]["run_bytes"].is_null());
  EXPECT_EQ(j["algorithm"]["phases"][0]["name"], "warm-up");
}

// A model that cannot take the data: the plan is made (parameters and
// traffic do not depend on the data) and says, as a note, that bagua run
// would refuse it; the recipe's own model has no such note.
TEST_F(PlanTest, AModelThatCannotTakeTheDataIsANote) {
  const std::string recipe = write_recipe("wrongmodel", "name: gradient_allreduce");
  CliResult right = run_bagua(dir_, "plan " + recipe + " --json -");
  ASSERT_EQ(right.exit_code, 0) << right.err;
  for (const auto& note : json::parse(right.out)["notes"])
    EXPECT_EQ(note.get<std::string>().find("would refuse"), std::string::npos) << note;
  CliResult wrong = run_bagua(dir_, "plan " + recipe + " --set model.torchscript=" + kSourceDir +
                                        "/tests/fixtures/models/mlp_small.pt --json -");
  ASSERT_EQ(wrong.exit_code, 0) << wrong.err;
  json j = json::parse(wrong.out);
  EXPECT_EQ(j["parameters"]["numel"], 784 * 32 + 32 + 32 * 10 + 10);
  bool said = false;
  for (const auto& note : j["notes"]) {
    const std::string text = note.get<std::string>();
    said = said || (text.find("bagua run would refuse this recipe") != std::string::npos &&
                    text.find("data.train.input_shape") != std::string::npos);
  }
  EXPECT_TRUE(said) << j["notes"];
}

// An image folder's eval set is labelled by data.train's class names, as
// the workers label it: a class the training folder lacks is a note (the
// model has no output for it), and a set with some of its classes is
// probed through the model like the training set.
TEST_F(PlanTest, AnEvalFolderIsLabelledAsTheWorkersLabelIt) {
  ASSERT_EQ(std::system(("/usr/bin/python3 " + kSourceDir +
                         "/scripts/make_image_folder.py --train-per-class 2 --val-per-class 1 --out " + dir_.string() +
                         " > /dev/null")
                            .c_str()),
            0);
  const fs::path images = dir_ / "fashion-images";
  for (const char* cls : {"3-dress", "7-sneaker"}) {
    fs::create_directories(images / "train-two" / cls);
    fs::copy(images / "train" / cls, images / "train-two" / cls, fs::copy_options::recursive);
  }
  fs::create_directories(images / "val-one" / "7-sneaker");
  fs::copy(images / "val" / "7-sneaker", images / "val-one" / "7-sneaker", fs::copy_options::recursive);
  const auto plan_with_eval = [&](const std::string& eval_folder) {
    const fs::path recipe = dir_ / ("images-" + eval_folder + ".yaml");
    std::ofstream(recipe) << "name: images\n"
                          << "model: {torchscript: " << kSourceDir << "/recipes/models/cnn.pt, loss: cross_entropy}\n"
                          << "data:\n"
                          << "  train: {format: image_folder, path: " << (images / "train-two").string()
                          << ", input_shape: [1, 28, 28]}\n"
                          << "  eval: {format: image_folder, path: " << (images / eval_folder).string()
                          << ", input_shape: [1, 28, 28]}\n"
                          << "  batch_size: 2\n"
                          << "optimizers: [{type: sgd, lr: 0.1}]\n"
                          << "output: {dir: " << (dir_ / "out").string() << "}\n";
    CliResult r = run_bagua(dir_, "plan " + recipe.string() + " --json -");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const auto refusals = [](const json& plan) {
    std::string all;
    for (const auto& note : plan["notes"]) {
      const std::string text = note.get<std::string>();
      if (text.find("would refuse") != std::string::npos) all += text + "\n";
    }
    return all;
  };
  const json all_classes = plan_with_eval("val");
  EXPECT_NE(refusals(all_classes).find("a class the training data does not have"), std::string::npos)
      << all_classes["notes"];
  EXPECT_EQ(all_classes["steps"]["eval_samples"], 10) << "the figures are the eval set's own";
  const json one_class = plan_with_eval("val-one");
  EXPECT_EQ(refusals(one_class), "");
  EXPECT_EQ(one_class["steps"]["eval_samples"], 1);
  EXPECT_NE(one_class["data"]["eval"].get<std::string>().find("of the training data's 2"), std::string::npos)
      << one_class["data"]["eval"];
}

}  // namespace
