#include "common/length.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace det {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

bool operator==(const Length& a, const Length& b) { return a.unit == b.unit && a.value == b.value; }
bool operator!=(const Length& a, const Length& b) { return !(a == b); }

std::string_view UnitName(Length::Unit unit) {
  switch (unit) {
    case Length::Unit::kBatches:
      return "batches";
    case Length::Unit::kRecords:
      return "records";
    case Length::Unit::kEpochs:
      return "epochs";
  }
  return "batches";
}

absl::StatusOr<Length::Unit> ParseLengthUnit(std::string_view name) {
  if (name == "batches") return Length::Unit::kBatches;
  if (name == "records") return Length::Unit::kRecords;
  if (name == "epochs") return Length::Unit::kEpochs;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown length unit '", std::string(name), "'; expected batches, records or epochs"));
}

std::string ToString(const Length& length) {
  std::string_view unit = UnitName(length.unit);
  if (length.value == 1) {  // "1 batch", "1 record", "1 epoch"
    unit.remove_suffix(length.unit == Length::Unit::kBatches ? 2 : 1);
  }
  return absl::StrCat(length.value, " ", std::string(unit));
}

nlohmann::json LengthToJson(const Length& length) {
  return nlohmann::json{{std::string(UnitName(length.unit)), length.value}};
}

absl::StatusOr<Length> LengthFromJson(const nlohmann::json& json, std::string_view field) {
  auto bad = [&]() {
    return absl::InvalidArgumentError(absl::StrCat("field '", std::string(field),
                                                   "' must be a non-negative integer (batches) or a map with "
                                                   "exactly one of batches, records or epochs, got ",
                                                   json.dump()));
  };
  Length length;
  const nlohmann::json* value = &json;
  if (json.is_object()) {
    if (json.size() != 1) return bad();
    auto unit = ParseLengthUnit(json.begin().key());
    if (!unit.ok()) return bad();
    length.unit = *unit;
    value = &json.begin().value();
  }
  if (value->is_number_unsigned()) {
    if (value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return bad();
    length.value = static_cast<int64_t>(value->get<uint64_t>());
  } else if (value->is_number_integer()) {
    length.value = value->get<int64_t>();
  } else {
    return bad();
  }
  if (length.value < 0) return bad();
  return length;
}

int64_t EpochLengthInBatches(int64_t global_batch_size, int64_t records_per_epoch,
                             int64_t fallback_batches_per_epoch) {
  if (records_per_epoch > 0 && global_batch_size > 0) return CeilDiv(records_per_epoch, global_batch_size);
  return fallback_batches_per_epoch > 0 ? fallback_batches_per_epoch : 0;
}

absl::StatusOr<int64_t> ToBatches(const Length& length, int64_t global_batch_size, int64_t batches_per_epoch,
                                  std::string_view field) {
  if (length.value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", std::string(field), "' must not be negative, got ", ToString(length)));
  }
  switch (length.unit) {
    case Length::Unit::kBatches:
      return length.value;
    case Length::Unit::kRecords:
      if (global_batch_size <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("cannot convert '", std::string(field), "' (", ToString(length),
                                                       ") to batches: global_batch_size must be positive, got ",
                                                       global_batch_size));
      }
      return CeilDiv(length.value, global_batch_size);
    case Length::Unit::kEpochs:
      if (batches_per_epoch <= 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot convert '", std::string(field), "' (", ToString(length),
                         ") to batches: the epoch length is unknown; set records_per_epoch in the config or "
                         "use a training data loader with a known length"));
      }
      if (length.value > std::numeric_limits<int64_t>::max() / batches_per_epoch) {
        return absl::InvalidArgumentError(absl::StrCat("field '", std::string(field), "' (", ToString(length), " of ",
                                                       batches_per_epoch, " batches) overflows"));
      }
      return length.value * batches_per_epoch;
  }
  return absl::InternalError("unknown length unit");
}

}  // namespace det
