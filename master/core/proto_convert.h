// Conversions between the Store's rows and the det.api.v1 messages, and the
// small encodings the core stores (placements as JSON). Pure; thread-safe.
#ifndef DET_MASTER_CORE_PROTO_CONVERT_H_
#define DET_MASTER_CORE_PROTO_CONVERT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <google/protobuf/timestamp.pb.h>
#include <nlohmann/json.hpp>

#include "det/api/v1/checkpoint.pb.h"
#include "det/api/v1/common.pb.h"
#include "det/api/v1/log.pb.h"
#include "det/api/v1/metrics.pb.h"
#include "master/search/scheduler.h"
#include "master/store/store.h"

namespace det::master {

// "ACTIVE" -> STATE_ACTIVE; STATE_UNSPECIFIED for an unknown name.
::det::api::v1::State StateEnum(const std::string& state);

// Unix milliseconds <-> Timestamp.
void SetTime(google::protobuf::Timestamp* t, int64_t ms);
int64_t TimeMs(const google::protobuf::Timestamp& t);

// `bytes` random bytes as lowercase hex (std::random_device).
std::string RandomHex(size_t bytes);

::det::api::v1::MetricsReport MetricProto(const MetricRow& row);
::det::api::v1::Checkpoint CheckpointProto(const CheckpointRow& row);
::det::api::v1::TaskLog TaskLogProto(const TaskLogRow& row);

// [{"agent_id": ..., "slots": [...]}, ...] as stored in AllocationRow.
nlohmann::json PlacementsJson(const std::vector<SlotAssignment>& placements);
// Inverse of PlacementsJson; false (out partly filled) on any other shape.
bool ParsePlacements(const std::string& text, std::vector<SlotAssignment>* out);

}  // namespace det::master

#endif  // DET_MASTER_CORE_PROTO_CONVERT_H_
