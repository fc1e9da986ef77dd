// Unit tests of recipe loading: typed defaults against the schema, extends,
// overrides, environment expansion, sizes, and valijson's agreement.
#include "recipe/recipe_test_util.h"
#include "recipe/stages.h"

#include <bagua/algorithms/catalog.h>

#include <gtest/gtest.h>

namespace bagua::testing {
namespace {

using nlohmann::json;

const json& schema() { return recipe::recipe_schema(); }

// The schema's default for a property: follows $ref for defaults kept there.
json schema_default(const std::string& pointer) {
  const json& s = schema().at(json::json_pointer(pointer));
  if (s.contains("default")) return s["default"];
  std::string ref = s.at("$ref").get<std::string>();
  return schema().at(json::json_pointer(ref.substr(1))).at("default");
}

Recipe minimal() { return load_recipe(source_path("tests/fixtures/recipes/good/minimal.yaml")); }

TEST(RecipeDefaults, TypedDefaultsAreTheSchemaDefaults) {
  Recipe r = minimal();
  const std::string p = "/properties/";
  EXPECT_EQ(to_string(r.model.loss), schema_default(p + "model/properties/loss"));
  EXPECT_EQ(r.model.ignore_params, schema_default(p + "model/properties/ignore_params").get<std::vector<std::string>>());
  EXPECT_EQ(r.data.batch_size, schema_default(p + "data/properties/batch_size"));
  EXPECT_FALSE(r.data.eval.has_value());
  EXPECT_FALSE(r.data.cache.has_value());
  const std::string sd = "/definitions/sampler_distributed/properties/";
  EXPECT_EQ(r.data.sampler.type, SamplerType::kDistributed);
  EXPECT_EQ(r.data.sampler.shuffle, schema_default(sd + "shuffle"));
  EXPECT_EQ(r.data.sampler.seed, schema_default(sd + "seed"));
  EXPECT_EQ(r.data.sampler.drop_last, schema_default(sd + "drop_last"));
  EXPECT_EQ(r.data.train.header, schema_default("/definitions/data_csv/properties/header"));
  EXPECT_EQ(std::string(1, r.data.train.delimiter), schema_default("/definitions/data_csv/properties/delimiter"));
  EXPECT_TRUE(r.data.train.input_columns.empty());
  EXPECT_TRUE(r.data.train.exclude_columns.empty());
  EXPECT_TRUE(r.data.train.mean_std.empty());
  EXPECT_EQ(schema_default("/definitions/data_csv/properties/normalize"), false);

  const OptimizerSpec& o = r.optimizers.at(0);
  const std::string os = "/definitions/optimizer_sgd/properties/";
  EXPECT_EQ(o.momentum, schema_default(os + "momentum"));
  EXPECT_EQ(o.dampening, schema_default(os + "dampening"));
  EXPECT_EQ(o.nesterov, schema_default(os + "nesterov"));
  EXPECT_EQ(o.weight_decay, schema_default(os + "weight_decay"));
  EXPECT_EQ(o.params, schema_default(os + "params").get<std::vector<std::string>>());
  EXPECT_EQ(o.fused, schema_default(os + "fused"));

  EXPECT_EQ(to_string(r.scheduler.type), schema_default("/definitions/scheduler/properties/type"));
  EXPECT_EQ(r.scheduler.warmup_steps, schema_default("/definitions/scheduler_constant/properties/warmup_steps"));

  const std::string ga = "/definitions/algorithm_gradient_allreduce/properties/";
  EXPECT_EQ(r.algorithm.name, schema_default("/definitions/algorithm/properties/name"));
  EXPECT_EQ(r.algorithm.flatten, schema_default(ga + "flatten"));
  EXPECT_EQ(r.algorithm.bucket_size, *parse_byte_size(schema_default(ga + "bucket_size").get<std::string>()));
  EXPECT_EQ(r.algorithm.kwargs, (json{{"hierarchical", schema_default(ga + "hierarchical")},
                                      {"average", schema_default(ga + "average")}}));

  const std::string d = p + "distributed/properties/";
  EXPECT_EQ(to_string(r.distributed.backend), schema_default(d + "backend"));
  EXPECT_EQ(r.distributed.nproc_per_node, schema_default(d + "nproc_per_node"));
  EXPECT_EQ(r.distributed.nnodes, schema_default(d + "nnodes"));
  EXPECT_EQ(r.distributed.node_rank, schema_default(d + "node_rank"));
  EXPECT_EQ(r.distributed.master_addr, schema_default(d + "master_addr"));
  EXPECT_EQ(r.distributed.master_port.has_value(), !schema_default(d + "master_port").is_null());
  EXPECT_EQ(r.distributed.timeout_s, schema_default(d + "timeout_s"));
  EXPECT_EQ(r.distributed.max_restarts, schema_default(d + "max_restarts"));

  const std::string t = p + "train/properties/";
  EXPECT_EQ(r.train.epochs, schema_default(t + "epochs"));
  EXPECT_EQ(r.train.max_steps.has_value(), !schema_default(t + "max_steps").is_null());
  EXPECT_EQ(r.train.seed, schema_default(t + "seed"));
  EXPECT_EQ(r.train.log_every_steps, schema_default(t + "log_every_steps"));
  EXPECT_EQ(to_string(r.train.on_nonfinite), schema_default(t + "on_nonfinite"));
  EXPECT_EQ(schema_default(t + "eval_every"), "epoch");
  EXPECT_EQ(r.train.eval_every.kind, EvalSchedule::Kind::kEpoch);
  EXPECT_FALSE(r.train.threads.has_value());

  const std::string c = p + "checkpoint/properties/";
  EXPECT_EQ(r.checkpoint.every_steps.has_value(), !schema_default(c + "every_steps").is_null());
  EXPECT_EQ(r.checkpoint.keep, schema_default(c + "keep"));
  EXPECT_EQ(r.checkpoint.resume, schema_default(c + "resume"));
  EXPECT_EQ(schema_default(c + "keep_best"), false);
  EXPECT_FALSE(r.checkpoint.keep_best.has_value());
  EXPECT_TRUE(schema_default(t + "early_stop").is_null());
  EXPECT_FALSE(r.train.early_stop.has_value());

  EXPECT_EQ(r.name, "minimal");
  EXPECT_EQ(r.output.dir, "runs/minimal");
}

// A default-constructed struct says the same as the schema, so C++ users
// building a Recipe by hand get the recipe defaults.
TEST(RecipeDefaults, StructInitialisersMatchTheSchema) {
  Recipe typed = minimal();
  Recipe blank;
  EXPECT_EQ(blank.data.batch_size, typed.data.batch_size);
  EXPECT_EQ(blank.algorithm.bucket_size, typed.algorithm.bucket_size);
  EXPECT_EQ(blank.algorithm.flatten, typed.algorithm.flatten);
  EXPECT_EQ(blank.distributed.master_port, typed.distributed.master_port);
  EXPECT_EQ(blank.distributed.timeout_s, typed.distributed.timeout_s);
  EXPECT_EQ(blank.train.log_every_steps, typed.train.log_every_steps);
  EXPECT_EQ(blank.checkpoint.keep, typed.checkpoint.keep);
  EXPECT_EQ(blank.checkpoint.resume, typed.checkpoint.resume);
  EXPECT_EQ(OptimizerSpec{}.warmup_steps, schema_default("/definitions/optimizer_qadam/properties/warmup_steps"));
  EXPECT_EQ(CacheSpec{}.writer_buffer_size, schema_default("/definitions/cache/properties/writer_buffer_size"));
  EXPECT_EQ(CacheSpec{}.capacity_per_node, *parse_byte_size("100MB"));
}

// keep_best: true is {metric: eval_loss, mode: min}; an unwritten mode is
// the metric's better direction; the resolved recipe says what was chosen.
TEST(RecipeDefaults, KeepBestAndEarlyStopFillTheirGoal) {
  const std::string path = source_path("tests/fixtures/recipes/good/minimal.yaml");
  const std::string eval = "data.eval={format: csv, path: " + source_path("tests/fixtures/recipes/data/tiny.csv") +
                           ", target_column: label}";
  Recipe r = load_recipe(path, {eval, "checkpoint.keep_best=true", "train.early_stop={patience: 4}"});
  ASSERT_TRUE(r.checkpoint.keep_best);
  EXPECT_EQ(r.checkpoint.keep_best->metric, EvalMetric::kEvalLoss);
  EXPECT_EQ(r.checkpoint.keep_best->mode, MetricMode::kMin);
  EXPECT_EQ(r.resolved["checkpoint"]["keep_best"], (json{{"metric", "eval_loss"}, {"mode", "min"}}));
  ASSERT_TRUE(r.train.early_stop);
  EXPECT_EQ(r.train.early_stop->patience, 4);
  EXPECT_EQ(r.train.early_stop->goal.metric, EvalMetric::kEvalLoss);
  EXPECT_EQ(r.train.early_stop->goal.mode, MetricMode::kMin);
  EXPECT_EQ(r.train.early_stop->min_delta, schema_default("/definitions/early_stop/properties/min_delta"));

  r = load_recipe(path, {eval, "checkpoint.keep_best={metric: eval_accuracy}",
                         "train.early_stop={patience: 2, metric: eval_accuracy, min_delta: 0.01}"});
  EXPECT_EQ(r.checkpoint.keep_best->metric, EvalMetric::kEvalAccuracy);
  EXPECT_EQ(r.checkpoint.keep_best->mode, MetricMode::kMax);
  EXPECT_EQ(r.train.early_stop->goal.mode, MetricMode::kMax);
  EXPECT_DOUBLE_EQ(r.train.early_stop->min_delta, 0.01);

  r = load_recipe(path, {eval, "train.early_stop={patience: 1, metric: eval_perplexity}"});
  EXPECT_EQ(r.train.early_stop->goal.metric, EvalMetric::kEvalPerplexity);
  EXPECT_EQ(r.train.early_stop->goal.mode, MetricMode::kMin);

  r = load_recipe(path, {eval, "checkpoint.keep_best={metric: eval_accuracy, mode: min}"});
  EXPECT_EQ(r.checkpoint.keep_best->mode, MetricMode::kMin) << "a written mode is kept";
  EXPECT_FALSE(load_recipe(path, {eval, "checkpoint.keep_best=false"}).checkpoint.keep_best);
}

TEST(RecipeDefaults, PerAlgorithmKwargDefaults) {
  std::string path = source_path("tests/fixtures/recipes/good/minimal.yaml");
  // Every algorithm's defaults, as its descriptor gives them (which
  // Catalog.AgreesWithTheRecipeSchema holds equal to the schema's).
  for (const auto& d : algorithm_catalog()) {
    std::vector<std::string> sets{"algorithm.name=" + d.name};
    if (!d.traits.required_optimizer.empty()) sets.push_back("optimizers=[{type: " + d.traits.required_optimizer + "}]");
    EXPECT_EQ(load_recipe(path, sets).algorithm.kwargs, d.defaults) << d.name;
  }
  EXPECT_EQ(load_recipe(path, {"algorithm.name=decentralized"}).algorithm.kwargs,
            (json{{"hierarchical", "auto"}, {"peer_selection_mode", "all"}, {"communication_interval", 1}}))
      << "Bagua's defaults, but hierarchical only when the job spans nodes";
  EXPECT_EQ(load_recipe(path, {"algorithm.name=gradient_allreduce"}).algorithm.kwargs["hierarchical"], false)
      << "gradient_allreduce keeps Bagua's default";
  Recipe q = load_recipe(path, {"algorithm.name=qadam", "optimizers=[{type: qadam}]"});
  EXPECT_EQ(q.optimizers[0].warmup_steps, 100);
  EXPECT_DOUBLE_EQ(q.optimizers[0].lr, 1e-3);
  EXPECT_DOUBLE_EQ(q.optimizers[0].betas[1], 0.999);
  EXPECT_DOUBLE_EQ(q.optimizers[0].eps, 1e-8);
}

TEST(RecipeExtends, ChainMergesInOrderAndTheFileWins) {
  Recipe r = load_recipe(source_path("tests/fixtures/recipes/good/extends_chain.yaml"));
  EXPECT_EQ(r.name, "extends_chain");  // never inherited
  EXPECT_EQ(r.model.loss, Loss::kCrossEntropy);              // root
  EXPECT_EQ(r.data.batch_size, 32);                           // mid over root
  EXPECT_EQ(r.data.train.format, DataFormat::kJsonl);         // the file, replacing root's csv source
  EXPECT_EQ(r.data.train.input_field, "tokens");
  ASSERT_EQ(r.optimizers.size(), 1u);                         // lists replace
  EXPECT_EQ(r.optimizers[0].type, OptimizerType::kAdam);
  EXPECT_EQ(r.scheduler.type, SchedulerType::kCosine);        // mid
  EXPECT_EQ(r.algorithm.name, "bytegrad");                    // second base
  EXPECT_EQ(r.algorithm.bucket_size, 1 << 20);
  EXPECT_EQ(r.distributed.master_port, 29600);                // second base over root
  EXPECT_EQ(r.distributed.nproc_per_node, 2);                 // root
  EXPECT_EQ(r.train.epochs, 2);                               // the file
  EXPECT_EQ(r.model.torchscript, source_path("tests/fixtures/recipes/models/tiny.pt"));  // relative to root.yaml
}

TEST(RecipeExtends, CycleIsAnErrorNamingTheChain) {
  try {
    load_recipe(source_path("tests/fixtures/recipes/bad/extends_cycle_a.yaml"));
    FAIL();
  } catch (const RecipeError& e) {
    EXPECT_NE(std::string(e.what()).find("extends_cycle_a.yaml -> "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("extends_cycle_b.yaml -> "), std::string::npos) << e.what();
  }
}

TEST(RecipeOverrides, SetValuesParsedAsYamlBeforeValidation) {
  Recipe r = load_recipe(source_path("tests/fixtures/recipes/good/minimal.yaml"),
                         {"data.batch_size=128", "optimizers[0].lr=0.5", "optimizers.0.momentum=0.9",
                          "scheduler={type: step, step_size: 10}", "algorithm.bucket_size=1KiB",
                          "data.eval.format=tensors",
                          "data.eval.path=" + source_path("tests/fixtures/recipes/data/tiny-tensors.pt")});
  EXPECT_EQ(r.data.batch_size, 128);
  EXPECT_DOUBLE_EQ(r.optimizers[0].lr, 0.5);
  EXPECT_DOUBLE_EQ(r.optimizers[0].momentum, 0.9);
  EXPECT_EQ(r.scheduler.type, SchedulerType::kStep);
  EXPECT_EQ(r.scheduler.step_size, 10);
  EXPECT_EQ(r.algorithm.bucket_size, 1024);
  ASSERT_TRUE(r.data.eval.has_value());
  EXPECT_EQ(r.data.eval->format, DataFormat::kTensors);
}

TEST(RecipeOverrides, UnknownKeyAndIndexErrorsSaySo) {
  std::string path = source_path("tests/fixtures/recipes/good/minimal.yaml");
  auto error_of = [&](const std::string& set) -> std::string {
    try {
      load_recipe(path, {set});
    } catch (const RecipeError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("trian.epochs=3").find("override of an unknown key \"trian\" (did you mean \"train\"?)"), std::string::npos);
  EXPECT_NE(error_of("optimizers[3].lr=1").find("optimizers has 1 items"), std::string::npos);
  EXPECT_NE(error_of("data.batch_size").find("expected key.path=value"), std::string::npos);
  EXPECT_NE(error_of("extends=x.yaml").find("extends cannot be overridden"), std::string::npos);
  EXPECT_NE(error_of("data.batch_size=[1").find("--set data.batch_size=[1:1:"), std::string::npos);
}

TEST(RecipeEnv, ExpandsWithDefaultsAndTypesUnquotedValues) {
  ScopedEnv env(std::vector<std::pair<std::string, std::string>>{{"BAGUA_TEST_ADDR", "10.1.2.3"}});
  Recipe r = load_recipe(source_path("tests/fixtures/recipes/good/env_defaults.yaml"),
                         {"distributed.master_addr=${BAGUA_TEST_ADDR}"});
  EXPECT_EQ(r.distributed.nproc_per_node, 2);  // "${...:-2}" unquoted -> integer
  EXPECT_EQ(r.distributed.master_addr, "10.1.2.3");
  EXPECT_EQ(r.output.dir, "runs/${literal}");  // $$ is a literal $
}

TEST(RecipeSizes, ParseUnitsOrFail) {
  EXPECT_EQ(parse_byte_size("10MiB"), 10 * 1024 * 1024);
  EXPECT_EQ(parse_byte_size("1.5KiB"), 1536);
  EXPECT_EQ(parse_byte_size("2GB"), 2000000000);
  EXPECT_EQ(parse_byte_size("512"), 512);
  EXPECT_EQ(parse_byte_size("1 MB"), 1000000);
  EXPECT_FALSE(parse_byte_size("10 megs"));
  EXPECT_FALSE(parse_byte_size("MiB"));
  EXPECT_FALSE(parse_byte_size("99999999TiB"));
}

// input_columns / exclude_columns: names, indices and "FIRST-LAST" ranges
// (one spec or a list); normalize {mean, std}: one number or a list.
TEST(RecipeCsvColumns, RangesExclusionsAndMeanStdAreTyped) {
  Recipe r = load_recipe(source_path("tests/fixtures/recipes/good/csv_columns.yaml"));
  const DataSource& t = r.data.train;
  ASSERT_EQ(t.input_columns.size(), 1u);
  EXPECT_EQ(t.input_columns[0].index, 0);
  EXPECT_EQ(t.input_columns[0].last, 3);
  EXPECT_TRUE(t.input_columns[0].name.empty());
  ASSERT_EQ(t.exclude_columns.size(), 1u);
  EXPECT_EQ(t.exclude_columns[0].name, "f1");
  EXPECT_EQ(t.exclude_columns[0].last, -1);
  EXPECT_EQ(t.mean_std.mean, std::vector<double>{0.5});
  EXPECT_EQ(t.mean_std.std, std::vector<double>{0.25});
  ASSERT_TRUE(r.data.eval.has_value());
  const DataSource& e = *r.data.eval;
  ASSERT_EQ(e.input_columns.size(), 2u);
  EXPECT_EQ(e.input_columns[0].name, "f3");
  EXPECT_EQ(e.input_columns[1].index, 0);
  EXPECT_EQ(e.input_columns[1].last, 1);
  EXPECT_TRUE(e.exclude_columns.empty());
  EXPECT_EQ(e.mean_std.std, (std::vector<double>{1, 2, 4}));
  // idx: true, false, or {mean, std} after the / 255.
  const std::string idx = "data.train={format: idx, images: " + source_path("tests/fixtures/recipes/data/tiny.csv") +
                          ", labels: " + source_path("tests/fixtures/recipes/data/tiny.csv");
  Recipe plain = load_recipe(source_path("tests/fixtures/recipes/good/minimal.yaml"), {idx + "}"});
  EXPECT_TRUE(plain.data.train.normalize);
  EXPECT_TRUE(plain.data.train.mean_std.empty());
  Recipe standardized = load_recipe(source_path("tests/fixtures/recipes/good/minimal.yaml"),
                                    {idx + ", normalize: {mean: 0.286, std: 0.353}}"});
  EXPECT_TRUE(standardized.data.train.normalize);
  EXPECT_EQ(standardized.data.train.mean_std.mean, std::vector<double>{0.286});
}

// A bad column spec is a recipe error at its own file:line:col and key path.
TEST(RecipeCsvColumns, ABackwardRangeIsReportedAtItsPlace) {
  const std::string path = source_path("tests/fixtures/recipes/bad/csv_range_backwards.yaml");
  try {
    load_recipe(path);
    FAIL() << "accepted";
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
    const Diagnostic& d = e.diagnostics()[0];
    EXPECT_EQ(d.key_path, "data.train.input_columns[1]");
    EXPECT_EQ(d.line, 9);
    EXPECT_EQ(d.column, 25);
    EXPECT_EQ(d.message, "the range \"3-1\" runs backwards: expected FIRST <= LAST (a range \"FIRST-LAST\" of "
                         "0-based column indices, both included (e.g. \"1-784\"))");
  }
  // The same through --set, and a csv normalize of true (no 0..255 range to scale from).
  auto error_of = [](const std::string& set) -> std::string {
    try {
      load_recipe(source_path("tests/fixtures/recipes/good/minimal.yaml"), {set});
    } catch (const RecipeError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("data.train.exclude_columns=-1").find("data.train.exclude_columns: expected a header name"),
            std::string::npos);
  EXPECT_EQ(error_of("data.train.input_columns=\"1 - x\""), "") << "a name with a '-' and a letter is a header name";
  EXPECT_NE(error_of("data.train.normalize=true").find("data.train.normalize: expected false or a mapping {mean, std}"),
            std::string::npos);
  EXPECT_NE(error_of("data.train.normalize={mean: 0, std: 0}").find("data.train.normalize.std: expected a number > 0"),
            std::string::npos);
}

TEST(RecipeReader, MissingRecipeFileIsAUserError) {
  try {
    load_recipe("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const RecipeError& e) {
    EXPECT_TRUE(e.is_user_error());
    EXPECT_NE(std::string(e.what()).find("cannot open the recipe file"), std::string::npos);
  }
}

TEST(RecipeFusedFlatten, UnwrittenFlattenIsResolvedToFalseWithANote) {
  Recipe r = load_recipe(source_path("tests/fixtures/recipes/good/low_precision_fused.yaml"));
  EXPECT_FALSE(r.algorithm.flatten);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].message.find("do_flatten=False"), std::string::npos);
}

// A base that cannot be read is one error: not also "missing required key"
// for each key it would have given.
TEST(RecipeExtends, AMissingBaseIsOneErrorNotAlsoTheKeysItWouldHaveGiven) {
  try {
    load_recipe(source_path("tests/fixtures/recipes/bad/extends_missing_sparse.yaml"));
    FAIL() << "loaded";
  } catch (const RecipeError& e) {
    ASSERT_EQ(e.diagnostics().size(), 1u) << e.what();
    EXPECT_EQ(e.diagnostics()[0].key_path, "extends");
    EXPECT_NE(e.diagnostics()[0].message.find("extended recipe not found"), std::string::npos) << e.what();
  }
  // Without a failed extends, a missing key is reported as ever.
  try {
    load_recipe(source_path("tests/fixtures/recipes/bad/missing_model.yaml"));
    FAIL() << "loaded";
  } catch (const RecipeError& e) {
    EXPECT_NE(std::string(e.what()).find("missing required key \"model\""), std::string::npos) << e.what();
  }
}

// Training inputs normalized one way and evaluation inputs another: said
// (a note), since the evaluation would measure the model on other data.
TEST(RecipeNotes, TrainAndEvalNormalizedDifferentlyIsNoted) {
  const std::string csv = source_path("recipes/fashion-thumbnails-csv.yaml");
  Recipe differ = load_recipe(csv, {"data.train.normalize={mean: 0.3, std: 0.3}"});
  ASSERT_EQ(differ.notes.size(), 1u);
  EXPECT_EQ(differ.notes[0].key_path, "data.train.normalize");
  EXPECT_NE(differ.notes[0].message.find("but data.eval.normalize is false"), std::string::npos)
      << differ.notes[0].message;
  EXPECT_TRUE(load_recipe(csv, {"data.train.normalize={mean: 0.3, std: 0.3}",
                                "data.eval.normalize={mean: 0.3, std: 0.3}"}).notes.empty());
  // IDX scales to [0, 1] by default on both sides: saying so on one is no mismatch.
  EXPECT_TRUE(load_recipe(source_path("recipes/fashion-mnist-cnn.yaml"), {"data.train.normalize=true"}).notes.empty());
}

// valijson is the authority: it accepts every good recipe's resolved tree and
// rejects every bad recipe whose errors the schema can see.
TEST(RecipeSchemaAgreement, ValijsonAcceptsResolvedGoodRecipes) {
  for (const auto& path : yaml_files("tests/fixtures/recipes/good")) {
    SCOPED_TRACE(path);
    json doc = load_recipe(path).resolved;
    auto errors = recipe::valijson_errors(doc);
    EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors[0].first + ": " + errors[0].second);
  }
}

TEST(RecipeSchemaAgreement, ValijsonRejectsWhatTheWalkerRejects) {
  int checked = 0;
  for (const auto& path : yaml_files("tests/fixtures/recipes/bad")) {
    recipe::Diagnostics diags;
    recipe::SourceTree tree = recipe::load_with_extends(path, diags);
    if (!diags.empty() || !tree.doc.is_object()) continue;  // not a schema matter
    CorpusCase c = parse_case(path);
    if (!c.overrides.empty() || !c.env.empty()) continue;
    recipe::expand_environment(tree, recipe::process_environment(), diags);
    if (!diags.empty()) continue;
    tree.doc["name"] = "x";
    recipe::check_against_schema(tree, schema(), diags);
    if (diags.empty()) continue;  // a semantic error, beyond the schema
    ++checked;
    EXPECT_FALSE(recipe::valijson_errors(tree.doc).empty()) << path << " passes valijson";
  }
  EXPECT_GE(checked, 25);
}

TEST(RecipeSchema, EmbeddedTextIsTheSchemaFile) {
  EXPECT_EQ(json::parse(recipe_schema_text()), json::parse(read_text(source_path("schemas/recipe.schema.json"))));
  CommandResult r = run_bagua({"schema"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(json::parse(r.output), schema());
}

}  // namespace
}  // namespace bagua::testing
