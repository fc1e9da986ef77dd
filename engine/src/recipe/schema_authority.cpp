// The recipe schema, embedded at build time, and valijson's verdict on a tree.
//
// valijson is the authority on whether a tree satisfies the schema; the
// walker (schema_walker.cpp) explains failures in words. The loader reports
// valijson's raw errors only if the walker found nothing, so a gap in the
// walker can never let an invalid recipe through.
#include "stages.h"

#define VALIJSON_USE_EXCEPTIONS 1
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

namespace bagua::recipe {

extern const char* const kRecipeSchemaText;

namespace {

const valijson::Schema& compiled_schema() {
  static const valijson::Schema* schema = [] {
    auto* s = new valijson::Schema();
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(recipe_schema());
    parser.populateSchema(adapter, *s);
    return s;
  }();
  return *schema;
}

std::string context_to_path(const std::vector<std::string>& context) {
  std::string path;
  for (const auto& part : context) {
    if (part.size() < 2 || part.front() != '[' || part.back() != ']') continue;
    std::string inner = part.substr(1, part.size() - 2);
    bool index = !inner.empty() && std::all_of(inner.begin(), inner.end(), ::isdigit);
    path = index ? path + part : child_path(path, inner);
  }
  return path;
}

}  // namespace

const json& recipe_schema() {
  static const json schema = json::parse(kRecipeSchemaText);
  return schema;
}

std::vector<std::pair<std::string, std::string>> valijson_errors(const json& doc) {
  valijson::Validator validator(valijson::Validator::kStrongTypes);
  valijson::ValidationResults results;
  valijson::adapters::NlohmannJsonAdapter adapter(doc);
  std::vector<std::pair<std::string, std::string>> out;
  if (validator.validate(compiled_schema(), adapter, &results)) return out;
  valijson::ValidationResults::Error error;
  while (results.popError(error)) out.emplace_back(context_to_path(error.context), error.description);
  return out;
}

}  // namespace bagua::recipe

const std::string& bagua::recipe_schema_text() {
  static const std::string text = bagua::recipe::kRecipeSchemaText;
  return text;
}
