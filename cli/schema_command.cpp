// bagua schema: print the recipe JSON Schema.
#include "command.h"

#include <bagua/recipe.h>

#include <iostream>

namespace bagua::cli {
namespace {

const CommandRegistration kSchema{
    "schema", "Print the JSON Schema of recipes (draft-07)",
    [](CLI::App& sub) -> CommandRunner {
      sub.footer(
          "The schema is the single source of truth for recipe keys, types, ranges and defaults;\n"
          "editors can use it for completion and checking.\n\n"
          "Examples:\n"
          "  bagua schema > recipe.schema.json\n"
          "  # then, first line of a recipe, for editors with the YAML language server:\n"
          "  # yaml-language-server: $schema=./recipe.schema.json\n");
      return []() -> int {
        std::cout << recipe_schema_text();
        if (!recipe_schema_text().empty() && recipe_schema_text().back() != '\n') std::cout << "\n";
        return kExitOk;
      };
    }};

}  // namespace
}  // namespace bagua::cli
