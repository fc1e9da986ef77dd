// The algorithm catalog (bagua/algorithms/catalog.h) and the registry that
// builds from it (bagua/algorithms/registry.h): every algorithm described
// once, buildable, with a traffic model, and in agreement with the recipe
// schema and with its own implementation.
#include <bagua/algorithms/catalog.h>
#include <bagua/algorithms/registry.h>
#include <bagua/communication.h>
#include <bagua/errors.h>
#include <bagua/recipe.h>
#include <bagua/system.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

namespace {

TEST(Catalog, DefaultsAndKeywordArguments) {
  auto algo = bagua::make_algorithm("gradient_allreduce");
  EXPECT_EQ(algo->name(), "gradient_allreduce");
  EXPECT_EQ(algo->kwargs(), (nlohmann::json{{"hierarchical", false}, {"average", true}}));
  auto hier = bagua::make_algorithm("gradient_allreduce", {{"hierarchical", true}});
  EXPECT_EQ(hier->kwargs()["hierarchical"], true);
  EXPECT_EQ(hier->kwargs()["average"], true);
}

// hierarchical: auto, the default where Bagua's is true: flat within one
// node, hierarchical across several; true and false keep their meaning.
TEST(Catalog, HierarchicalAutoIsFlatOnOneNodeAndHierarchicalAcrossNodes) {
  bagua::AlgorithmBuildContext one, two;
  one.nnodes = 1;
  two.nnodes = 2;
  for (const char* name : {"bytegrad", "decentralized", "low_precision_decentralized"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(bagua::find_algorithm(name)->defaults["hierarchical"], "auto");
    EXPECT_EQ(bagua::make_algorithm(name, {}, one)->kwargs()["hierarchical"], false);
    EXPECT_EQ(bagua::make_algorithm(name, {}, two)->kwargs()["hierarchical"], true);
    EXPECT_EQ(bagua::make_algorithm(name, {{"hierarchical", true}}, one)->kwargs()["hierarchical"], true);
    EXPECT_EQ(bagua::make_algorithm(name, {{"hierarchical", false}}, two)->kwargs()["hierarchical"], false);
  }
  EXPECT_EQ(bagua::make_algorithm("gradient_allreduce", {}, two)->kwargs()["hierarchical"], false)
      << "gradient_allreduce keeps Bagua's default, false";
  EXPECT_EQ(bagua::make_algorithm("gradient_allreduce", {{"hierarchical", "auto"}}, two)->kwargs()["hierarchical"],
            true);
  EXPECT_EQ(bagua::hierarchical_choice("bytegrad", {}, 1), "hierarchical: auto (flat on one node)");
  EXPECT_EQ(bagua::hierarchical_choice("bytegrad", {}, 3), "hierarchical: auto (hierarchical across 3 nodes)");
  EXPECT_EQ(bagua::hierarchical_choice("bytegrad", {{"hierarchical", true}}, 1), "hierarchical: true");
  EXPECT_EQ(bagua::hierarchical_choice("async", {}, 2), "");
  try {
    bagua::make_algorithm("bytegrad", {{"hierarchical", "yes"}}, one);
    ADD_FAILURE() << "hierarchical: yes accepted";
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'hierarchical' must be a boolean or \"auto\", got \"yes\""),
              std::string::npos)
        << e.what();
  }
}

TEST(Catalog, TraitsDescribeEachAlgorithm) {
  EXPECT_TRUE(bagua::find_algorithm("gradient_allreduce")->traits.replicas_identical);
  EXPECT_FALSE(bagua::find_algorithm("decentralized")->traits.replicas_identical);
  EXPECT_FALSE(bagua::find_algorithm("async")->traits.replicas_identical);
  EXPECT_EQ(bagua::find_algorithm("qadam")->traits.required_optimizer, "qadam");
  EXPECT_EQ(bagua::find_algorithm("bytegrad")->traits.required_optimizer, "");
  EXPECT_EQ(bagua::find_algorithm("no_such"), nullptr);
  EXPECT_EQ(bagua::find_optimizer_owner("qadam"), bagua::find_algorithm("qadam"));
  EXPECT_EQ(bagua::find_optimizer_owner("adam"), nullptr);
  EXPECT_EQ(bagua::find_optimizer_owner(""), nullptr);
}

// An algorithm that requires an optimizer says all the rest of bagua needs
// of it (the recipe checks, plan, bench), owns that type alone, and builds
// it (make_algorithm_optimizer()); no other type is any algorithm's.
TEST(Catalog, ARequiredOptimizerIsDescribedAndBuiltByItsAlgorithm) {
  std::set<std::string> owned;
  for (const auto& d : bagua::algorithm_catalog()) {
    const std::string& type = d.traits.required_optimizer;
    if (type.empty()) continue;
    SCOPED_TRACE(d.name);
    EXPECT_TRUE(owned.insert(type).second) << type << " is required by two algorithms";
    EXPECT_EQ(bagua::find_optimizer_owner(type), &d);
    EXPECT_TRUE(bagua::enum_from_string<bagua::OptimizerType>(type).has_value()) << type << " is no recipe type";
    EXPECT_FALSE(d.optimizer.only_with_its_algorithm_because.empty());
    EXPECT_FALSE(d.optimizer.not_fused_because.empty());
    EXPECT_GT(d.optimizer.state_tensors, 0);
    EXPECT_FALSE(d.optimizer.state.empty());
    EXPECT_TRUE(bagua::enum_from_string<bagua::OptimizerType>(d.optimizer.stand_in).has_value());
    EXPECT_EQ(bagua::find_optimizer_owner(d.optimizer.stand_in), nullptr) << "a stand-in any algorithm takes";
    auto w = torch::zeros({3}, torch::requires_grad());
    EXPECT_NE(bagua::make_algorithm_optimizer(type, {w}, bagua::OptimizerSpec{}), nullptr);
  }
  EXPECT_EQ(bagua::make_algorithm_optimizer("sgd", {torch::zeros({3}, torch::requires_grad())}, bagua::OptimizerSpec{}),
            nullptr);
}

TEST(Catalog, MistakesAreExplained) {
  try {
    bagua::make_algorithm("gradient_allreduse");
    FAIL();
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("known: gradient_allreduce"), std::string::npos) << e.what();
  }
  try {
    bagua::make_algorithm("gradient_allreduce", {{"peer_selection_mode", "all"}});
    FAIL();
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("does not accept 'peer_selection_mode' (it accepts: average, hierarchical)"),
              std::string::npos)
        << e.what();
  }
  try {
    bagua::make_algorithm("gradient_allreduce", {{"average", "yes"}});
    FAIL();
  } catch (const bagua::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'average' must be a boolean, got a string"), std::string::npos) << e.what();
  }
}

// The recipe schema and the registry describe the same algorithms, with
// the same keyword arguments and defaults.
TEST(Catalog, AgreesWithTheRecipeSchema) {
  auto schema = nlohmann::json::parse(bagua::recipe_schema_text());
  std::vector<std::string> schema_names, registry_names;
  for (const auto& n : schema["definitions"]["algorithm"]["properties"]["name"]["enum"]) {
    schema_names.push_back(n.get<std::string>());
  }
  for (const auto& spec : bagua::algorithm_catalog()) registry_names.push_back(spec.name);
  EXPECT_EQ(schema_names, registry_names);
  for (const auto& spec : bagua::algorithm_catalog()) {
    std::string def = "algorithm_" + spec.name;
    ASSERT_TRUE(schema["definitions"].contains(def)) << def;
    nlohmann::json props = schema["definitions"][def]["properties"];
    for (const char* common : {"name", "flatten", "bucket_size"}) props.erase(common);
    std::set<std::string> schema_keys, registry_keys;
    for (const auto& [k, v] : props.items()) schema_keys.insert(k);
    for (const auto& [k, v] : spec.defaults.items()) registry_keys.insert(k);
    EXPECT_EQ(schema_keys, registry_keys) << spec.name;
    for (const auto& [k, v] : spec.defaults.items()) {
      EXPECT_EQ(props[k]["default"], v) << spec.name << "." << k;
    }
  }
}

// Every algorithm of the catalog can be built, and its descriptor carries
// what the planner needs: a traffic model that gives a runnable plan of the
// buckets it is handed, with every phase named.
TEST(Catalog, EveryAlgorithmIsBuildableAndHasATrafficModel) {
  ASSERT_EQ(bagua::algorithm_catalog().size(), 6u) << "Bagua's six";
  for (const auto& d : bagua::algorithm_catalog()) {
    SCOPED_TRACE(d.name);
    EXPECT_TRUE(bagua::algorithm_implemented(d.name));
    EXPECT_FALSE(d.description.empty());
    ASSERT_TRUE(static_cast<bool>(d.traffic)) << d.name << " has no traffic model: bagua plan could not predict it";
    bagua::TrafficContext ctx;
    ctx.world.nnodes = 2;
    ctx.world.nproc_per_node = 2;
    ctx.world.world_size = 4;
    ctx.world.node_leaders = {0, 2};
    ctx.world.backend = "gloo";
    ctx.world.device = "cpu";
    ctx.bucket_bytes = 1 << 20;
    ctx.buckets = [](int64_t alignment, bool flatten, const std::string& registers) {
      bagua::PlanBuckets b;
      b.registers = registers;
      b.flatten = flatten;
      b.alignment = alignment;
      bagua::PlanBucket one;
      one.name = "bucket0";
      one.numel = 1000;
      one.padded_numel = (1000 + alignment - 1) / alignment * alignment;
      one.bytes = one.padded_numel * 4;
      b.buckets.push_back(one);
      b.bytes = one.bytes;
      return b;
    };
    // Models see kwargs as built: "auto" decided (resolve_kwargs()).
    const bagua::PlanAlgorithm a = d.traffic(ctx, bagua::resolve_kwargs(d.name, {}, ctx.world.nnodes));
    EXPECT_TRUE(a.runnable) << a.note;
    ASSERT_FALSE(a.phases.empty());
    for (const auto& p : a.phases) EXPECT_FALSE(p.name.empty() || p.what.empty());
    ASSERT_EQ(a.buckets.buckets.size(), 1u);
    // Something crosses the wire between 4 workers, except in async's
    // steps, whose traffic is in its rounds.
    int64_t sent = 0;
    for (const auto& p : a.phases) sent += p.leader.total();
    EXPECT_GT(sent, 0);
    for (const auto& variant : d.plan_variants) {
      nlohmann::json kw = d.defaults;
      for (const auto& [k, v] : variant.items()) {
        EXPECT_TRUE(kw.contains(k)) << "plan variant of unknown kwarg " << k;
        kw[k] = v;
      }
      EXPECT_FALSE(d.traffic(ctx, bagua::resolve_kwargs(d.name, kw, ctx.world.nnodes)).phases.empty())
          << variant.dump();
    }
  }
}

TEST(Catalog, TheRecipeChecksAskTheDescriptor) {
  const auto* decentralized = bagua::find_algorithm("decentralized");
  ASSERT_TRUE(decentralized && decentralized->check_world);
  nlohmann::json kw = decentralized->defaults;
  kw["peer_selection_mode"] = "shift_one";
  kw["hierarchical"] = false;
  EXPECT_FALSE(decentralized->check_world(kw, 1, 4)) << "4 peers pair up";
  auto odd = decentralized->check_world(kw, 1, 3);
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->key, "peer_selection_mode");
  EXPECT_NE(odd->message.find("even number of peers"), std::string::npos) << odd->message;
  for (const auto& d : bagua::algorithm_catalog()) {
    EXPECT_EQ(d.traits.keeps_bucket_state, d.name == "low_precision_decentralized" || d.name == "async") << d.name;
  }
}

// The descriptor is the implementation's: make_algorithm() builds the
// algorithm of that name with those defaults, keeps_bucket_state as the
// AlgorithmImpl says it, and a required optimizer's state is averaged
// state (AveragedOptimizerState).
TEST(Catalog, TraitsMatchTheImplementation) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(bagua::find_free_port()).c_str(), 1);
  if (!bagua::is_initialized()) bagua::init_process_group();
  for (const auto& d : bagua::algorithm_catalog()) {
    SCOPED_TRACE(d.name);
    bagua::AlgorithmBuildContext context;
    const std::string& type = d.traits.required_optimizer;
    if (!type.empty()) {
      auto optimizer = bagua::make_algorithm_optimizer(type, {torch::zeros({3}, torch::requires_grad())}, {});
      EXPECT_NE(std::dynamic_pointer_cast<bagua::AveragedOptimizerState>(optimizer), nullptr)
          << "the optimizer an algorithm averages the state of says which state";
      context.optimizers = {optimizer};
    }
    auto algorithm = bagua::make_algorithm(d.name, {}, context);
    EXPECT_EQ(algorithm->name(), d.name);
    EXPECT_EQ(algorithm->kwargs(), bagua::resolve_kwargs(d.name, {}, 1)) << "one node: hierarchical auto is flat";
    auto impl = algorithm->reify(bagua::default_group());
    EXPECT_EQ(impl->keeps_bucket_state(), d.traits.keeps_bucket_state);
  }
}

}  // namespace
