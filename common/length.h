// A training length in Determined's units (batches, records or epochs), as
// used by searcher.max_length, min_validation_period and
// min_checkpoint_period, and its conversion to batches.
#ifndef DET_COMMON_LENGTH_H_
#define DET_COMMON_LENGTH_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace det {

// An aggregate: `Length{Length::Unit::kEpochs, 3}`. A config's lengths are
// validated by the config parser (value >= 0); the functions below check again.
struct Length {
  enum class Unit { kBatches, kRecords, kEpochs };
  Unit unit = Unit::kBatches;
  int64_t value = 0;
};

bool operator==(const Length& a, const Length& b);
bool operator!=(const Length& a, const Length& b);

// "batches", "records" or "epochs": the config key of `unit`.
std::string_view UnitName(Length::Unit unit);

// Parses a config key ("batches", "records", "epochs"); InvalidArgument otherwise.
absl::StatusOr<Length::Unit> ParseLengthUnit(std::string_view name);

// "937 batches", "1 epoch", "60000 records".
std::string ToString(const Length& length);

// {"batches": 937}: the config form.
nlohmann::json LengthToJson(const Length& length);

// Inverse of LengthToJson; also accepts a bare non-negative integer (batches).
// InvalidArgument (naming `field`) on any other shape or a negative value.
absl::StatusOr<Length> LengthFromJson(const nlohmann::json& json, std::string_view field = "length");

// The number of batches in an epoch: ceil(records_per_epoch / global_batch_size)
// when records_per_epoch > 0 and global_batch_size > 0, otherwise
// `fallback_batches_per_epoch` (typically the training data loader's length;
// pass 0 when unknown). Returns 0 when no epoch length is known.
int64_t EpochLengthInBatches(int64_t global_batch_size, int64_t records_per_epoch,
                             int64_t fallback_batches_per_epoch);

// Converts `length` to batches:
//   batches -> value;
//   records -> ceil(value / global_batch_size);
//   epochs  -> value * batches_per_epoch (see EpochLengthInBatches).
// `field` names the config field in errors ("searcher.max_length").
// Errors: InvalidArgument for a negative value, for global_batch_size <= 0 with
// records, or on overflow; FailedPrecondition for epochs when
// batches_per_epoch <= 0 (no epoch length is known). Pure and thread-safe.
absl::StatusOr<int64_t> ToBatches(const Length& length, int64_t global_batch_size, int64_t batches_per_epoch,
                                  std::string_view field = "length");

}  // namespace det

#endif  // DET_COMMON_LENGTH_H_
