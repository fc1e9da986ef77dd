// KeyPath (bagua/recipe_key_path.h): parsing, the canonical text, walking,
// making the way for --set, and "is under"; and the callers whose rules
// rest on it (what a resume compares).
#include <bagua/errors.h>
#include <bagua/provenance.h>
#include <bagua/recipe_key_path.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bagua {
namespace {

using json = nlohmann::json;

std::string parse_error(const std::string& text) {
  std::string error;
  EXPECT_FALSE(KeyPath::parse(text, error).has_value()) << text;
  return error;
}

TEST(KeyPath, ParsesKeysAndIndexesIntoCanonicalText) {
  const KeyPath p = KeyPath::parse("optimizers[2].lr");
  ASSERT_EQ(p.steps().size(), 3u);
  EXPECT_EQ(p.steps()[0].key, "optimizers");
  EXPECT_TRUE(p.steps()[1].is_index());
  EXPECT_EQ(p.steps()[1].index, 2u);
  EXPECT_EQ(p.steps()[2].key, "lr");
  EXPECT_EQ(p.to_string(), "optimizers[2].lr");

  // .N is an index too, written back in brackets; leading zeros go.
  EXPECT_EQ(KeyPath::parse("optimizers.2.lr"), p);
  EXPECT_EQ(KeyPath::parse("optimizers.2.lr").to_string(), "optimizers[2].lr");
  EXPECT_EQ(KeyPath::parse("optimizers[002].lr").to_string(), "optimizers[2].lr");
  EXPECT_EQ(KeyPath::parse("a[0][1]").to_string(), "a[0][1]");
  EXPECT_EQ(KeyPath::parse("data.train.images").steps().size(), 3u);
  EXPECT_EQ(KeyPath::parse("name").to_string(), "name");
  EXPECT_EQ(KeyPath::parse("[3]").to_string(), "[3]");

  // As lenient around brackets as --set always was.
  EXPECT_EQ(KeyPath::parse("a.[0]").to_string(), "a[0]");
  EXPECT_EQ(KeyPath::parse("a[0]b").to_string(), "a[0].b");
  EXPECT_EQ(KeyPath::parse("a[0].").to_string(), "a[0]");

  EXPECT_TRUE(KeyPath().is_root());
  EXPECT_EQ(KeyPath().to_string(), "");
}

TEST(KeyPath, MalformedTextSaysWhatIsWrong) {
  EXPECT_EQ(parse_error(""), "empty key path");
  EXPECT_EQ(parse_error("a..b"), "empty key in path \"a..b\"");
  EXPECT_EQ(parse_error(".a"), "empty key in path \".a\"");
  EXPECT_EQ(parse_error("a."), "path ends with a dot");
  EXPECT_EQ(parse_error("a[x].b"), "malformed list index at \"[x].b\" (expected [N])");
  EXPECT_EQ(parse_error("a[]"), "malformed list index at \"[]\" (expected [N])");
  EXPECT_EQ(parse_error("a[1"), "malformed list index at \"[1\" (expected [N])");
  EXPECT_EQ(parse_error("a[-1]"), "malformed list index at \"[-1]\" (expected [N])");
  // Too large for an index: an error, not std::out_of_range.
  EXPECT_EQ(parse_error("a[99999999999999999999999]"), "list index too large at \"[99999999999999999999999]\"");
  EXPECT_EQ(parse_error("a.99999999999999999999999.b"), "list index too large at \"99999999999999999999999.b\"");

  try {
    KeyPath::parse("data..train");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(e.is_user_error());
    EXPECT_EQ(std::string(e.what()), "malformed key path \"data..train\": empty key in path \"data..train\"");
  }
}

TEST(KeyPath, FindsValuesAndNothingElse) {
  const json doc = json::parse(R"({"a": {"b": [10, {"c": "x"}]}, "n": null, "s": "text"})");
  ASSERT_NE(KeyPath::parse("a.b[1].c").find(doc), nullptr);
  EXPECT_EQ(*KeyPath::parse("a.b[1].c").find(doc), "x");
  EXPECT_EQ(*KeyPath::parse("a.b.0").find(doc), 10);
  EXPECT_EQ(*KeyPath::parse("n").find(doc), nullptr);  // a null value is found
  EXPECT_EQ(KeyPath().find(doc), &doc);

  EXPECT_EQ(KeyPath::parse("a.missing").find(doc), nullptr);
  EXPECT_EQ(KeyPath::parse("a.b[2]").find(doc), nullptr);     // past the end
  EXPECT_EQ(KeyPath::parse("a[0]").find(doc), nullptr);       // a mapping, not a list
  EXPECT_EQ(KeyPath::parse("a.b.c").find(doc), nullptr);      // a list, not a mapping
  EXPECT_EQ(KeyPath::parse("s.x").find(doc), nullptr);        // a string has no keys
  EXPECT_EQ(KeyPath::parse("n.x").find(doc), nullptr);        // nor has null

  json writable = doc;
  json* c = KeyPath::parse("a.b[1].c").find(writable);
  ASSERT_NE(c, nullptr);
  *c = "y";
  EXPECT_EQ(writable["a"]["b"][1]["c"], "y");
  EXPECT_EQ(writable.size(), doc.size());  // finding made nothing
}

TEST(KeyPath, MakeParentMakesMappingsOnTheWayButNotTheValue) {
  json doc = json::parse(R"({"data": {"eval": null}, "optimizers": [{"lr": 1}]})");
  std::vector<std::string> made;
  std::string error;
  auto record = [&](const std::string& path) { made.push_back(path); };

  json* parent = KeyPath::parse("data.eval.format").make_parent(doc, error, record);
  ASSERT_NE(parent, nullptr) << error;
  EXPECT_EQ(parent, &doc["data"]["eval"]);
  EXPECT_EQ(doc["data"]["eval"], json::object());  // the null became a mapping; format is not made
  EXPECT_EQ(made, std::vector<std::string>{"data.eval"});

  made.clear();
  parent = KeyPath::parse("scheduler.args.gamma").make_parent(doc, error, record);
  ASSERT_NE(parent, nullptr) << error;
  EXPECT_EQ(made, (std::vector<std::string>{"scheduler", "scheduler.args"}));
  EXPECT_FALSE(parent->contains("gamma"));

  made.clear();
  parent = KeyPath::parse("optimizers[0].lr").make_parent(doc, error, record);
  ASSERT_NE(parent, nullptr) << error;
  EXPECT_EQ(parent, &doc["optimizers"][0]);
  parent = KeyPath::parse("optimizers[0]").make_parent(doc, error, record);
  EXPECT_EQ(parent, &doc["optimizers"]);
  EXPECT_TRUE(made.empty());
}

TEST(KeyPath, MakeParentRefusesWhatItCannotMake) {
  json doc = json::parse(R"({"optimizers": [{"lr": 1}], "model": {"torchscript": "m.pt"}})");
  const json before = doc;
  std::string error;
  EXPECT_EQ(KeyPath::parse("optimizers[3].lr").make_parent(doc, error), nullptr);
  EXPECT_EQ(error, "optimizers has 1 items");
  EXPECT_EQ(KeyPath::parse("optimizers[1]").make_parent(doc, error), nullptr);
  EXPECT_EQ(error, "optimizers has 1 items");
  EXPECT_EQ(KeyPath::parse("model[0]").make_parent(doc, error), nullptr);
  EXPECT_EQ(error, "model is not a list");
  EXPECT_EQ(KeyPath::parse("model.torchscript.x").make_parent(doc, error), nullptr);
  EXPECT_EQ(error, "model.torchscript is string \"m.pt\", not a mapping");
  EXPECT_EQ(KeyPath::parse("[0]").make_parent(doc, error), nullptr);
  EXPECT_EQ(error, "the recipe is not a list");
  EXPECT_EQ(KeyPath().make_parent(doc, error), nullptr);
  EXPECT_EQ(doc, before);
}

TEST(KeyPath, UnderMeansAWholeStepBelow) {
  const KeyPath train = KeyPath::parse("data.train");
  EXPECT_TRUE(KeyPath::parse("data.train.images").is_under(train));
  EXPECT_TRUE(KeyPath::parse("data.train[0]").is_under(train));
  EXPECT_FALSE(KeyPath::parse("data.trainer").is_under(train));
  EXPECT_FALSE(KeyPath::parse("data.trainer").is_same_or_under(train));
  EXPECT_FALSE(KeyPath::parse("data").is_under(train));  // above, not under
  EXPECT_FALSE(train.is_under(train));
  EXPECT_TRUE(train.is_same_or_under(train));
  EXPECT_TRUE(train.is_under(KeyPath()));
  EXPECT_FALSE(KeyPath().is_under(KeyPath()));
  EXPECT_TRUE(KeyPath().is_same_or_under(KeyPath()));

  // Indexes compare whole: [1] is not a prefix of [10].
  EXPECT_FALSE(KeyPath::parse("optimizers[10].lr").is_under(KeyPath::parse("optimizers[1]")));
  EXPECT_TRUE(KeyPath::parse("optimizers.1.lr").is_under(KeyPath::parse("optimizers[1]")));

  // By text, for text that may not parse.
  EXPECT_TRUE(KeyPath::is_same_or_under("data.we[ird", "data"));
  EXPECT_TRUE(KeyPath::is_same_or_under("anything", ""));
  EXPECT_FALSE(KeyPath::is_same_or_under("data", "data.train"));
  EXPECT_FALSE(KeyPath::is_same_or_under("", "data"));
}

// What a resume compares (bagua/provenance.h) rests on "is under".
TEST(KeyPath, ResumeIgnoresWholeKeysOnly) {
  EXPECT_FALSE(recipe_key_changes_training("data"));
  EXPECT_FALSE(recipe_key_changes_training("data.train.path"));
  EXPECT_FALSE(recipe_key_changes_training("train.epochs"));
  EXPECT_FALSE(recipe_key_changes_training("train.early_stop.patience")) << "when a run ends, as max_steps";
  EXPECT_TRUE(recipe_key_changes_training("train.epochs_extra"));
  EXPECT_TRUE(recipe_key_changes_training("train.seed"));
  EXPECT_FALSE(recipe_key_changes_training("algorithm.flatten"));
  EXPECT_FALSE(recipe_key_changes_training("algorithm.bucket_size"));
  EXPECT_TRUE(recipe_key_changes_training("algorithm.name"));
  EXPECT_FALSE(recipe_key_changes_training("optimizers[0].fused"));
  EXPECT_FALSE(recipe_key_changes_training("optimizers[12].fused"));
  EXPECT_TRUE(recipe_key_changes_training("optimizers[0].lr"));
  EXPECT_TRUE(recipe_key_changes_training("optimizers[0].fused_extra"));
  EXPECT_TRUE(recipe_key_changes_training("optimizers"));
  EXPECT_TRUE(recipe_key_changes_training("model.loss"));
  EXPECT_FALSE(recipe_key_changes_training("model.torchscript"));
}

}  // namespace
}  // namespace bagua
