// MasterCore: resource pools (GetResourcePools, an experiment's pool and its
// default priority, pool max_slots) and agent and slot control (GetAgent,
// Enable/Disable Agent/Slot with drain). The enabled / draining / disabled
// slot state lives in the agents table (AgentRow), so it survives a master
// restart and an agent's re-registration.
#include <algorithm>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_json.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

// Ids echoed in errors are cut to this many bytes.
constexpr size_t kMaxEchoedId = 128;

std::string Echo(const std::string& s) { return s.substr(0, kMaxEchoedId); }

// Disabled slots of an agent row: slot -> drain. Malformed entries are
// skipped (the master wrote them).
std::map<int, bool> DisabledSlots(const AgentRow& row) {
  std::map<int, bool> out;
  if (row.disabled_slots_json.empty() || row.disabled_slots_json == "[]") return out;
  nlohmann::json list = nlohmann::json::parse(row.disabled_slots_json, nullptr, false);
  if (!list.is_array()) return out;
  for (const auto& e : list) {
    if (!e.is_object() || !e.contains("slot") || !e["slot"].is_number_integer()) continue;
    out[e["slot"].get<int>()] = e.value("drain", false);
  }
  return out;
}

void SetDisabledSlots(AgentRow* row, const std::map<int, bool>& slots) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [slot, drain] : slots) list.push_back({{"slot", slot}, {"drain", drain}});
  row->disabled_slots_json = list.dump();
}

// The device index a slot id names on `agent`: "N" or "AGENT/N".
absl::StatusOr<int> SlotIndex(const AgentRuntime& agent, const std::string& slot_id) {
  std::string digits = slot_id;
  const std::string prefix = agent.row.id + "/";
  if (digits.compare(0, prefix.size(), prefix) == 0) digits = digits.substr(prefix.size());
  int index = -1;
  if (absl::SimpleAtoi(digits, &index)) {
    for (const auto& d : agent.devices) {
      if (d.id() == index) return index;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("slot '", Echo(slot_id), "' of agent '", agent.row.id, "' not found (it has ",
                   agent.devices.size(), " slot(s): 0..", static_cast<int>(agent.devices.size()) - 1, ")"));
}

// An agent as stored (disconnected): its row and devices.
std::unique_ptr<AgentRuntime> AgentFromRow(const AgentRow& row) {
  auto agent = std::make_unique<AgentRuntime>();
  agent->row = row;
  agent->last_heartbeat_ms = row.last_seen_ms;
  nlohmann::json devices = nlohmann::json::parse(row.devices_json, nullptr, false);
  if (!devices.is_array()) return agent;
  for (const auto& d : devices) {
    apiv1::Device device;
    if (JsonToMessage(d.dump(), &device).ok()) agent->devices.push_back(device);
  }
  return agent;
}

apiv1::DeviceType PoolSlotType(const std::vector<const AgentRuntime*>& agents) {
  for (const AgentRuntime* a : agents) {
    for (const auto& d : a->devices) {
      if (d.type() == apiv1::DEVICE_TYPE_CUDA) return apiv1::DEVICE_TYPE_CUDA;
    }
  }
  return apiv1::DEVICE_TYPE_CPU;
}

}  // namespace

apiv1::Agent MasterCore::AgentProtoLocked(const AgentRuntime& a) {
  apiv1::Agent agent;
  const std::string& id = a.row.id;
  agent.set_id(id);
  agent.set_hostname(a.row.hostname);
  for (const auto& addr : a.addresses) agent.add_addresses(addr);
  agent.set_resource_pool(a.row.resource_pool);
  agent.set_version(a.row.version);
  SetTime(agent.mutable_registered_time(), a.row.registered_ms);
  SetTime(agent.mutable_last_heartbeat_time(), a.last_heartbeat_ms);
  agent.set_connected(a.connected);
  agent.set_enabled(a.row.enabled);
  agent.set_draining(a.row.draining);
  const std::map<int, bool> disabled = DisabledSlots(a.row);
  std::set<std::string> allocs;
  for (const auto& d : a.devices) {
    auto* slot = agent.add_slots();
    slot->set_id(absl::StrCat(id, "/", d.id()));
    slot->set_agent_id(id);
    *slot->mutable_device() = d;
    auto dit = disabled.find(d.id());
    slot->set_enabled(a.row.enabled && dit == disabled.end());
    slot->set_draining((!a.row.enabled && a.row.draining) || (dit != disabled.end() && dit->second));
    auto sit = a.slot_allocation.find(d.id());
    if (sit != a.slot_allocation.end()) {
      slot->set_allocation_id(sit->second);
      allocs.insert(sit->second);
      auto ait = allocations_.find(sit->second);
      if (ait != allocations_.end()) slot->set_trial_id(ait->second->trial_id);
    }
  }
  for (const auto& al : allocs) agent.add_allocation_ids(al);
  return agent;
}

absl::StatusOr<AgentRuntime*> MasterCore::FindAgentLocked(const std::string& id) {
  auto it = agents_.find(id);
  if (it != agents_.end()) return it->second.get();
  if (id.empty()) return absl::InvalidArgumentError("agent_id is required");
  DET_ASSIGN_OR_RETURN(std::optional<AgentRow> stored, store_->GetAgent(id));
  if (!stored) return absl::NotFoundError(absl::StrCat("agent '", Echo(id), "' not found"));
  // Known from before a restart and not registered since: kept as a
  // disconnected agent, as recovery keeps one that ran an allocation.
  std::unique_ptr<AgentRuntime> agent = AgentFromRow(*stored);
  agent->last_heartbeat_mono_ms = MonoMs();
  AgentRuntime* raw = agent.get();
  agents_.emplace(id, std::move(agent));
  return raw;
}

// Asks the allocations on `agent` (or only the one holding `slot` when >= 0)
// to checkpoint and exit; they are rescheduled where placement is allowed.
void MasterCore::PreemptOnAgentLocked(const AgentRuntime& agent, int slot, const std::string& why) {
  std::set<std::string> ids;
  for (const auto& [s, alloc_id] : agent.slot_allocation) {
    if (slot < 0 || s == slot) ids.insert(alloc_id);
  }
  for (const auto& id : ids) {
    auto it = allocations_.find(id);
    if (it == allocations_.end() || it->second->preempt || it->second->kill_sent) continue;
    AllocationRuntime& alloc = *it->second;
    RequestStopLocked(alloc);
    TrialLogLocked(alloc.trial_id, alloc.id,
                   absl::StrCat("[det-master] ", why, ": the trial checkpoints and moves to another slot"));
    spdlog::info("allocation {} (trial {}) preempted: {}", alloc.id, alloc.trial_id, why);
  }
}

absl::StatusOr<apiv1::GetAgentResponse> MasterCore::GetAgent(const apiv1::GetAgentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  apiv1::GetAgentResponse resp;
  auto it = agents_.find(req.agent_id());
  if (it != agents_.end()) {
    *resp.mutable_agent() = AgentProtoLocked(*it->second);
    return resp;
  }
  // A read does not load a stored agent into memory.
  if (req.agent_id().empty()) return absl::InvalidArgumentError("agent_id is required");
  DET_ASSIGN_OR_RETURN(std::optional<AgentRow> stored, store_->GetAgent(req.agent_id()));
  if (!stored) return absl::NotFoundError(absl::StrCat("agent '", Echo(req.agent_id()), "' not found"));
  *resp.mutable_agent() = AgentProtoLocked(*AgentFromRow(*stored));
  return resp;
}

absl::StatusOr<apiv1::EnableAgentResponse> MasterCore::EnableAgent(const apiv1::EnableAgentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AgentRuntime * agent, FindAgentLocked(req.agent_id()));
  agent->row.enabled = true;
  agent->row.draining = false;
  DET_RETURN_IF_ERROR(store_->UpsertAgent(agent->row));
  spdlog::info("agent {} enabled", agent->row.id);
  ScheduleLocked();
  apiv1::EnableAgentResponse resp;
  *resp.mutable_agent() = AgentProtoLocked(*agent);
  return Committed(w, resp);
}

absl::StatusOr<apiv1::DisableAgentResponse> MasterCore::DisableAgent(const apiv1::DisableAgentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AgentRuntime * agent, FindAgentLocked(req.agent_id()));
  agent->row.enabled = false;
  agent->row.draining = req.drain();
  DET_RETURN_IF_ERROR(store_->UpsertAgent(agent->row));
  spdlog::info("agent {} disabled{}", agent->row.id, req.drain() ? " (draining: running work finishes)" : "");
  if (!req.drain()) PreemptOnAgentLocked(*agent, -1, absl::StrCat("agent ", agent->row.id, " disabled"));
  apiv1::DisableAgentResponse resp;
  *resp.mutable_agent() = AgentProtoLocked(*agent);
  return Committed(w, resp);
}

absl::StatusOr<apiv1::EnableSlotResponse> MasterCore::EnableSlot(const apiv1::EnableSlotRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AgentRuntime * agent, FindAgentLocked(req.agent_id()));
  DET_ASSIGN_OR_RETURN(int slot, SlotIndex(*agent, req.slot_id()));
  std::map<int, bool> disabled = DisabledSlots(agent->row);
  disabled.erase(slot);
  SetDisabledSlots(&agent->row, disabled);
  DET_RETURN_IF_ERROR(store_->UpsertAgent(agent->row));
  spdlog::info("agent {}: slot {} enabled", agent->row.id, slot);
  ScheduleLocked();
  apiv1::Agent shown = AgentProtoLocked(*agent);
  apiv1::EnableSlotResponse resp;
  for (const auto& s : shown.slots()) {
    if (s.device().id() == slot) *resp.mutable_slot() = s;
  }
  return Committed(w, resp);
}

absl::StatusOr<apiv1::DisableSlotResponse> MasterCore::DisableSlot(const apiv1::DisableSlotRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AgentRuntime * agent, FindAgentLocked(req.agent_id()));
  DET_ASSIGN_OR_RETURN(int slot, SlotIndex(*agent, req.slot_id()));
  std::map<int, bool> disabled = DisabledSlots(agent->row);
  disabled[slot] = req.drain();
  SetDisabledSlots(&agent->row, disabled);
  DET_RETURN_IF_ERROR(store_->UpsertAgent(agent->row));
  spdlog::info("agent {}: slot {} disabled{}", agent->row.id, slot, req.drain() ? " (draining)" : "");
  if (!req.drain()) {
    PreemptOnAgentLocked(*agent, slot, absl::StrCat("slot ", slot, " of agent ", agent->row.id, " disabled"));
  }
  apiv1::Agent shown = AgentProtoLocked(*agent);
  apiv1::DisableSlotResponse resp;
  for (const auto& s : shown.slots()) {
    if (s.device().id() == slot) *resp.mutable_slot() = s;
  }
  return Committed(w, resp);
}

void MasterCore::ApplyAgentControlLocked(std::vector<SchedAgent>* agents) {
  for (SchedAgent& s : *agents) {
    auto it = agents_.find(s.id);
    if (it == agents_.end()) continue;
    const AgentRow& row = it->second->row;
    if (!row.enabled || row.draining) s.enabled = false;
    const std::map<int, bool> disabled = DisabledSlots(row);
    if (disabled.empty()) continue;
    s.free_slots.erase(std::remove_if(s.free_slots.begin(), s.free_slots.end(),
                                      [&](int slot) { return disabled.count(slot) > 0; }),
                       s.free_slots.end());
  }
  // A pool's max_slots: the scheduler sees only cap - used free slots.
  for (const ResourcePoolConfig& pool : options_.resource_pools.pools) {
    if (pool.max_slots <= 0) continue;
    int64_t used = 0;
    for (const auto& [id, a] : agents_) {
      if (a->row.resource_pool == pool.name) used += static_cast<int64_t>(a->used_slots.size());
    }
    int64_t allowed = std::max<int64_t>(0, pool.max_slots - used);
    for (SchedAgent& s : *agents) {
      if (s.resource_pool != pool.name || !s.enabled) continue;
      if (static_cast<int64_t>(s.free_slots.size()) > allowed) s.free_slots.resize(static_cast<size_t>(allowed));
      allowed -= static_cast<int64_t>(s.free_slots.size());
    }
  }
}

void MasterCore::ApplyPoolDefaultsLocked(ExperimentRuntime& exp) {
  ResourcesConfig& resources = exp.config.resources;
  if (!resources.resource_pool_given) {
    // The pool chosen at creation is in the stored config JSON.
    nlohmann::json stored = nlohmann::json::parse(exp.row.config_json, nullptr, false);
    const nlohmann::json* pool = nullptr;
    if (stored.is_object() && stored.contains("resources") && stored["resources"].is_object() &&
        stored["resources"].contains("resource_pool") && stored["resources"]["resource_pool"].is_string()) {
      pool = &stored["resources"]["resource_pool"];
    }
    if (pool != nullptr) {
      resources.resource_pool = pool->get<std::string>();
    } else {
      resources.resource_pool =
          ResolveExperimentPool(options_.resource_pools, resources).value_or(resources.resource_pool);
    }
  }
  const ResourcePoolConfig* pool = options_.resource_pools.Find(resources.resource_pool);
  if (pool != nullptr && !resources.priority) exp.priority = pool->default_priority;
}

absl::StatusOr<apiv1::GetResourcePoolsResponse> MasterCore::GetResourcePools(
    const apiv1::GetResourcePoolsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  const ResourcePoolsConfig& config = options_.resource_pools;
  std::vector<std::string> names;
  if (config.declared()) {
    for (const auto& p : config.pools) names.push_back(p.name);
  } else {
    std::set<std::string> seen = {"default"};
    names.push_back("default");
    for (const auto& [id, a] : agents_) {
      if (seen.insert(a->row.resource_pool).second) names.push_back(a->row.resource_pool);
    }
  }
  apiv1::GetResourcePoolsResponse resp;
  const int total = static_cast<int>(names.size());
  const int offset = std::clamp(req.offset(), 0, total);
  const int end = req.limit() > 0 ? std::min(total, offset + req.limit()) : total;
  for (int i = offset; i < end; ++i) {
    const std::string& name = names[i];
    const ResourcePoolConfig* declared = config.Find(name);
    auto* p = resp.add_resource_pools();
    p->set_name(name);
    p->set_description(declared ? declared->description : "");
    p->set_is_default(name == config.default_compute_pool);
    p->set_scheduler_type("priority");
    p->set_default_priority(declared ? declared->default_priority : 42);
    p->set_preemption_enabled(declared ? declared->preemption : true);
    std::vector<const AgentRuntime*> members;
    int available = 0, used = 0, agents = 0;
    for (const auto& [id, a] : agents_) {
      if (a->row.resource_pool != name) continue;
      members.push_back(a.get());
      used += static_cast<int>(a->used_slots.size());
      if (!a->connected) continue;
      ++agents;
      if (!a->row.enabled || a->row.draining) continue;
      const std::map<int, bool> disabled = DisabledSlots(a->row);
      for (const auto& d : a->devices) available += disabled.count(d.id()) ? 0 : 1;
    }
    p->set_slot_type(PoolSlotType(members));
    p->set_num_agents(agents);
    p->set_slots_available(available);
    p->set_slots_used(used);
    int pending = 0;
    for (const auto& r : pending_) pending += r.resource_pool == name ? 1 : 0;
    p->set_num_pending_allocations(pending);
    const int cap = declared ? declared->max_slots : 0;
    p->set_max_slots_per_allocation(cap > 0 ? std::min(cap, available) : available);
  }
  auto* page = resp.mutable_pagination();
  page->set_offset(offset);
  page->set_limit(req.limit());
  page->set_start_index(offset);
  page->set_end_index(end);
  page->set_total(total);
  return resp;
}

}  // namespace det::master
