#include "master/core/proto_convert.h"

#include <random>

#include "common/proto_json.h"
#include "master/core/checkpoint_facts.h"

namespace det::master {
namespace apiv1 = ::det::api::v1;

apiv1::State StateEnum(const std::string& state) {
  apiv1::State out = apiv1::STATE_UNSPECIFIED;
  apiv1::State_Parse("STATE_" + state, &out);
  return out;
}

void SetTime(google::protobuf::Timestamp* t, int64_t ms) {
  t->set_seconds(ms / 1000);
  t->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
}

int64_t TimeMs(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xf]);
  }
  return out;
}

apiv1::MetricsReport MetricProto(const MetricRow& r) {
  apiv1::MetricsReport m;
  m.set_id(r.id);
  m.set_trial_id(r.trial_id);
  m.set_total_batches(r.total_batches);
  m.set_total_epochs(r.total_epochs);
  m.set_group(r.group);
  for (const auto& [k, v] : r.metrics) (*m.mutable_metrics())[k] = v;
  m.set_archived(r.archived);
  SetTime(m.mutable_end_time(), r.time_ms);
  m.set_trial_run_id(r.trial_run_id);
  return m;
}

apiv1::Checkpoint CheckpointProto(const CheckpointRow& r) {
  apiv1::Checkpoint c;
  c.set_uuid(r.uuid);
  c.set_trial_id(r.trial_id);
  c.set_experiment_id(r.experiment_id);
  apiv1::CheckpointState state = apiv1::CHECKPOINT_STATE_UNSPECIFIED;
  apiv1::CheckpointState_Parse("CHECKPOINT_STATE_" + r.state, &state);
  c.set_state(state);
  c.set_total_batches(r.total_batches);
  c.set_total_epochs(r.total_epochs);
  c.set_total_records(r.total_records);
  for (const auto& [k, v] : r.resources) (*c.mutable_resources())[k] = v;
  c.set_size_bytes(CheckpointSizeBytes(r.resources));
  for (const auto& [k, v] : r.validation_metrics) (*c.mutable_validation_metrics())[k] = v;
  c.set_storage_path(r.storage_path);
  nlohmann::json metadata = nlohmann::json::parse(r.metadata_json, nullptr, false);
  if (metadata.is_object()) {
    auto st = JsonToStruct(metadata);
    if (st.ok()) *c.mutable_metadata() = *std::move(st);
  }
  SetTime(c.mutable_report_time(), r.time_ms);
  if (r.searcher_metric) c.set_searcher_metric(*r.searcher_metric);
  return c;
}

apiv1::TaskLog TaskLogProto(const TaskLogRow& r) {
  apiv1::TaskLog log;
  log.set_id(r.id);
  log.set_trial_id(r.trial_id);
  log.set_allocation_id(r.allocation_id);
  log.set_rank(r.rank);
  SetTime(log.mutable_timestamp(), r.time_ms);
  apiv1::StdType st = apiv1::STD_TYPE_UNSPECIFIED;
  if (r.stream == "stdout") st = apiv1::STD_TYPE_STDOUT;
  if (r.stream == "stderr") st = apiv1::STD_TYPE_STDERR;
  log.set_stdtype(st);
  apiv1::LogLevel level;
  if (apiv1::LogLevel_Parse(r.level, &level)) log.set_level(level);
  log.set_message(r.message);
  return log;
}

nlohmann::json PlacementsJson(const std::vector<SlotAssignment>& placements) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : placements) out.push_back({{"agent_id", p.agent_id}, {"slots", p.slots}});
  return out;
}

bool ParsePlacements(const std::string& text, std::vector<SlotAssignment>* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return false;
  for (const auto& p : j) {
    if (!p.is_object() || !p.contains("agent_id") || !p["agent_id"].is_string() || !p.contains("slots") ||
        !p["slots"].is_array()) {
      return false;
    }
    SlotAssignment a;
    a.agent_id = p["agent_id"].get<std::string>();
    for (const auto& s : p["slots"]) {
      if (!s.is_number_integer()) return false;
      a.slots.push_back(s.get<int>());
    }
    out->push_back(std::move(a));
  }
  return true;
}

}  // namespace det::master
