// Every field an experiment config may hold, and who reads it.
//
// One row per dotted field path the parser (experiment_config.cc and
// hparams.cc) accepts. A row either names the source file outside the parser
// that reads the parsed value, with the token that reads it there (e.g.
// "master/search/asha_layout.cc" reads searcher.stop_once as ".stop_once"), or says
// why the field does not apply to det-cpp; a config holding such a field is
// accepted with one warning line built from that reason:
//
//   field 'environment.ports' is accepted but not used: det-cpp trials expose no ports
//
// common/config_fields_test.cc keeps this table honest: every path the parser
// accepts must have a row, and every consumer file must contain its token, so
// a field parsed but read nowhere fails the build's tests.
//
// Everything here is constant data and pure functions; thread-safe.
#ifndef DET_COMMON_CONFIG_FIELDS_H_
#define DET_COMMON_CONFIG_FIELDS_H_

#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace det {

struct ConfigField {
  // Dotted path ("searcher.metric"). With `subtree`, the row also covers every
  // path below it ("hyperparameters.lr.type", "searcher.max_length.epochs").
  std::string_view path;
  bool subtree = false;
  // Source file (relative to the repository root) that reads the value, and
  // a token that occurs in it where it does. Empty for a field that does not
  // apply.
  std::string_view consumer;
  std::string_view token;
  // For a field that does not apply: why (the warning's text). Empty for a
  // field with a consumer.
  std::string_view unused_reason;
};

// The table, in config order.
const std::vector<ConfigField>& ExperimentConfigFields();

// The row covering `path` (its own row, or a subtree row above it); nullptr
// when none does.
const ConfigField* FindConfigField(std::string_view path);

// "field 'PATH' is accepted but not used: REASON".
std::string UnusedFieldWarning(const ConfigField& field);

// One warning per field of `raw` (the config as parsed to JSON) whose row has
// an unused_reason, in table order. Null fields count as absent.
std::vector<std::string> UnusedFieldWarnings(const nlohmann::json& raw);

}  // namespace det

#endif  // DET_COMMON_CONFIG_FIELDS_H_
