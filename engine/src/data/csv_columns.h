// Which columns of a CSV file a data source reads, resolved against the
// file's header (or its first row's width): the target, the input columns
// (input_columns less exclude_columns; by default every column but the
// target and the sampler's complexity column), the complexity column; and
// the words that every error about them quotes.
#pragma once

#include <bagua/data.h>

#include <cstdint>
#include <string>
#include <vector>

namespace bagua::data {

struct CsvColumns {
  std::vector<std::string> names;  // the header's; empty without one
  int64_t count = 0;               // fields in every row
  int64_t target = -1;
  std::vector<int64_t> inputs;     // in the order they make a sample
  int64_t complexity = -1;         // read for the sampler (LoadOptions::complexity_field); -1: none
  std::string list;     // the input columns: "1-784 ('p1'..'p784')"
  // "input columns 1-784 ('p1'..'p784'), 784 of the file's 786 columns: every column but the target ..."
  std::string summary;

  // "'f1' (index 1)" with a header, "1" without.
  std::string name(int64_t c) const;
  // "input column 'f1' (index 1)", "target column ...", "complexity column ...".
  std::string role(int64_t c) const;
};

// Resolves `source`'s column keys against a file whose header holds `names`
// (empty when header is false) and whose rows have `count` fields. Throws
// DataError "PATH:LINE: ..." (LINE: the header's or first row's) naming the
// recipe key when a column is not in the file, is read twice, or the
// choice leaves no input column.
CsvColumns resolve_csv_columns(const DataSource& source, const LoadOptions& options, std::vector<std::string> names,
                               int64_t count, int line);

}  // namespace bagua::data
