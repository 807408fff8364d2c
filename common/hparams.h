// The hyperparameter space of an experiment (Determined's `hyperparameters`
// section) and the pure functions that draw points from it: random sampling,
// grid enumeration and local mode's first point.
//
// Config forms (YAML shown; JSON alike):
//   lr: 0.01                                   # const (any scalar or list)
//   lr: {type: const, val: 0.01}
//   units: {type: int, minval: 8, maxval: 64, count: 4}      # count: grid only
//   dropout: {type: double, minval: 0.0, maxval: 0.5, count: 3}
//   lr: {type: log, minval: -4, maxval: -1, base: 10, count: 4}  # base^x
//   act: {type: categorical, vals: [relu, tanh]}
//   optimizer: {name: adam, lr: {type: log, ...}}  # a map without a known
//                                                  # `type`: nested hparams
// A sampled point is a JSON object with the same keys (nested objects for
// nested hparams), e.g. {"lr": 0.003, "optimizer": {"name": "adam"}}.
#ifndef DET_COMMON_HPARAMS_H_
#define DET_COMMON_HPARAMS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace det {

struct ConfigSource;

struct Hyperparameter {
  enum class Type { kConst, kInt, kDouble, kLog, kCategorical, kObject };
  Type type = Type::kConst;
  nlohmann::json val;                             // kConst: the value (any JSON)
  double minval = 0;                              // kInt (integral), kDouble, kLog (exponent)
  double maxval = 0;                              // kInt (integral), kDouble, kLog (exponent)
  std::optional<int64_t> count;                   // kInt, kDouble, kLog: grid points
  double base = 10;                               // kLog
  std::vector<nlohmann::json> vals;               // kCategorical: non-empty
  std::map<std::string, Hyperparameter> nested;   // kObject

  static Hyperparameter Const(nlohmann::json value);
  static Hyperparameter Int(int64_t minval, int64_t maxval, std::optional<int64_t> count = std::nullopt);
  static Hyperparameter Double(double minval, double maxval, std::optional<int64_t> count = std::nullopt);
  static Hyperparameter Log(double minval, double maxval, double base = 10,
                            std::optional<int64_t> count = std::nullopt);
  static Hyperparameter Categorical(std::vector<nlohmann::json> vals);
  static Hyperparameter Object(std::map<std::string, Hyperparameter> nested);
};

using HyperparameterSpace = std::map<std::string, Hyperparameter>;

// "const", "int", "double", "log", "categorical", "object".
std::string_view HyperparameterTypeName(Hyperparameter::Type type);

// Whether `hp` is drawn by a search: not a const, nor an object of consts only.
bool IsSearched(const Hyperparameter& hp);

// Parses a hyperparameters section (a JSON object, e.g. from ParseYamlToJson)
// found at dotted `path`. Validates each spec: required fields, no unknown
// fields, minval <= maxval, count >= 1, base > 0 and != 1, non-empty vals;
// int bounds are integers; log bounds that look like values rather than
// exponents (both in (0, 1], or base^maxval > 1e10) are refused naming the
// range they would sample and the exponents probably meant.
// Errors are InvalidArgument naming the field path, with source name and line
// when `source` is given (otherwise the source name is "hyperparameters").
absl::StatusOr<HyperparameterSpace> HyperparameterSpaceFromJson(const nlohmann::json& spec,
                                                                const ConfigSource* source = nullptr,
                                                                std::string_view path = "hyperparameters");

// The config form: {"lr": {"type": "log", "minval": -4, "maxval": -1,
// "base": 10}, "gbs": {"type": "const", "val": 32}, "opt": {...nested...}}.
// HyperparameterSpaceFromJson(HParamsToJson(s)) == s.
nlohmann::json HParamsToJson(const HyperparameterSpace& space);
nlohmann::json HyperparameterToJson(const Hyperparameter& hparam);

// Random search: one point. int: uniform over [minval, maxval]; double:
// uniform over [minval, maxval); log: base^uniform(minval, maxval);
// categorical: a uniformly chosen val; const: its value (draws nothing).
// Keys are visited in sorted order, depth-first, so the result is a pure
// function of the space and the rng state (the distributions are implemented
// here, not by the standard library, so they are the same everywhere).
nlohmann::json SampleHParams(const HyperparameterSpace& space, std::mt19937_64& rng);

// Local mode: SampleHParams with an rng seeded by `seed` (consts are their
// values; a search hparam gets its first sampled value).
nlohmann::json FirstHParams(const HyperparameterSpace& space, uint64_t seed);

// The largest grid GridHParams enumerates (also the largest count of one
// int/double/log hparam in a grid search).
inline constexpr uint64_t kMaxGridPoints = 10000;

// Checks the space can be enumerated as a grid: every int/double/log hparam
// has a count ("grid search requires field 'hyperparameters.lr.count'") and
// the grid has at most kMaxGridPoints points. Returns the number of points.
// Errors carry the source name and line when `source` is given.
absl::StatusOr<uint64_t> ValidateGridSpace(const HyperparameterSpace& space, const ConfigSource* source = nullptr,
                                           std::string_view path = "hyperparameters");

// Grid search: the cartesian product of every hparam's axis, keys in sorted
// order with the last key varying fastest. Axes: const -> its value;
// categorical -> all vals; int -> min(count, maxval-minval+1) evenly spaced
// integers including both ends (rounded, deduplicated); double -> count points
// from minval to maxval inclusive; log -> base^(those exponents); count 1 ->
// the midpoint (as Determined). Nested hparams contribute their own axes.
// InvalidArgument as ValidateGridSpace.
absl::StatusOr<std::vector<nlohmann::json>> GridHParams(const HyperparameterSpace& space);

// The points of one hparam's grid axis (requires count for int/double/log).
absl::StatusOr<std::vector<nlohmann::json>> GridAxis(const Hyperparameter& hparam, std::string_view path);

// hparams["global_batch_size"] as a positive integer; InvalidArgument
// otherwise. For sampled points (what a trial receives).
absl::StatusOr<int64_t> GlobalBatchSize(const nlohmann::json& hparams);

bool operator==(const Hyperparameter& a, const Hyperparameter& b);
inline bool operator!=(const Hyperparameter& a, const Hyperparameter& b) { return !(a == b); }

}  // namespace det

#endif  // DET_COMMON_HPARAMS_H_
