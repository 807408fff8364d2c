// MasterCore: det.agent.v1 (registration, the Connect stream, heartbeats,
// process state, logs) and the det.api.v1 agent and slot listings.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/det_version.h"
#include "common/proto_json.h"
#include "common/status_macros.h"
#include "common/sha256.h"
#include "common/utf8.h"
#include "master/core/agent_version.h"
#include "master/core/auth.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

constexpr size_t kMaxAgentIdBytes = 128;

// The agent's AbiManifest, bounded (common/abi_check.h); null when it sent
// none.
absl::StatusOr<std::shared_ptr<const AbiManifest>> ReportedManifest(const agentv1::RegisterAgentRequest& req) {
  if (!req.has_abi_manifest()) return std::shared_ptr<const AbiManifest>();
  const agentv1::AbiManifest& m = req.abi_manifest();
  const std::string who = absl::StrCat("agent '", req.agent_id().substr(0, 128), "'");
  if (static_cast<size_t>(m.symbol_hashes_size()) > kMaxAbiManifestSymbols ||
      static_cast<size_t>(m.sdk_sonames_size()) > kMaxAbiManifestLibraries ||
      static_cast<size_t>(m.libraries_size()) > kMaxAbiManifestLibraries) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": abi_manifest over its bounds (", kMaxAbiManifestSymbols,
                                                   " symbols, ", kMaxAbiManifestLibraries, " libraries)"));
  }
  DET_ASSIGN_OR_RETURN(AbiManifest manifest,
                       AbiManifestFromParts({m.symbol_hashes().begin(), m.symbol_hashes().end()},
                                            {m.sdk_sonames().begin(), m.sdk_sonames().end()}, m.sdk_version(),
                                            {m.libraries().begin(), m.libraries().end()}, who));
  return std::shared_ptr<const AbiManifest>(std::make_shared<AbiManifest>(std::move(manifest)));
}

// An agent id labels the master's det_slots series and names the agent in
// every listing, so it is bounded: a hostname's characters, at most
// kMaxAgentIdBytes bytes.
absl::Status ValidateAgentId(const std::string& id) {
  const bool ok_chars = std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (id.size() <= kMaxAgentIdBytes && ok_chars) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "agent_id '", absl::CHexEscape(id.substr(0, 64)), id.size() > 64 ? "...' (" : "' (", id.size(),
      " bytes): an agent id is 1 to ", kMaxAgentIdBytes,
      " bytes of letters, digits, '.', '_' and '-'; give det-agent such an --id (default: the hostname)"));
}

absl::Status ValidateRegistration(const agentv1::RegisterAgentRequest& req) {
  if (req.agent_id().empty()) return absl::InvalidArgumentError("agent_id is required");
  DET_RETURN_IF_ERROR(ValidateAgentId(req.agent_id()));
  if (req.devices_size() == 0) return absl::InvalidArgumentError(absl::StrCat("agent '", req.agent_id(), "' reports no slots"));
  const auto& ports = req.rendezvous_ports();
  if ((ports.first() != 0 || ports.last() != 0) &&
      (ports.first() < 1 || ports.last() > 65535 || ports.first() > ports.last())) {
    return absl::InvalidArgumentError(absl::StrCat("agent '", req.agent_id(), "': rendezvous_ports ", ports.first(),
                                                   "..", ports.last(), " is not a port range within 1..65535"));
  }
  return absl::OkStatus();
}

// OK when agent id req.agent_id() has no credential yet (`known_hash` empty)
// or req presents the one whose SHA-256 is `known_hash` (constant time).
absl::Status CheckAgentCredential(const agentv1::RegisterAgentRequest& req, const std::string& known_hash) {
  if (known_hash.empty()) return absl::OkStatus();
  if (req.agent_credential().empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "agent '", req.agent_id(), "' is registered with a per-agent credential and this registration has none "
        "(the agent keeps it in <work-dir>/agent-credential; an operator resets a lost one with "
        "det-master --reset-agent ", req.agent_id(), ")"));
  }
  if (!AuthCore::ConstantTimeEquals(Sha256Hex(req.agent_credential()), known_hash)) {
    return absl::PermissionDeniedError(absl::StrCat("agent '", req.agent_id(),
                                                    "': wrong per-agent credential (an operator resets it with "
                                                    "det-master --reset-agent ", req.agent_id(), ")"));
  }
  return absl::OkStatus();
}

// The trial of allocation `id` when it is (or lately was) placed on `agent`;
// 0 otherwise.
int64_t PlacedTrial(const std::map<std::string, std::unique_ptr<AllocationRuntime>>& allocations,
                    const AgentRuntime& agent, const std::string& id) {
  auto it = allocations.find(id);
  if (it != allocations.end()) return RunsOn(*it->second, agent.row.id) ? it->second->trial_id : 0;
  for (const auto& [recent, trial_id] : agent.recent_allocations) {
    if (recent == id) return trial_id;
  }
  return 0;
}

// Logs a message of `agent` refused for naming what is not placed on it;
// every message up to 8, then every power of two (a flood stays quiet).
void RefuseAgentMessage(AgentRuntime& agent, const std::string& what) {
  const int64_t n = ++agent.refused_messages;
  if (n <= 8 || (n & (n - 1)) == 0) {
    spdlog::warn("agent {}: refused {} ({} refused so far): PERMISSION_DENIED, not placed on this agent",
                 agent.row.id, what, n);
  }
}

}  // namespace

absl::StatusOr<agentv1::RegisterAgentResponse> MasterCore::RegisterAgent(const agentv1::RegisterAgentRequest& req) {
  DET_RETURN_IF_ERROR(ValidateRegistration(req));
  DET_RETURN_IF_ERROR(CheckAgentVersion(req.agent_id(), req.version(), kDetVersion));
  if (options_.resource_manager.slurm_managed()) {
    return absl::FailedPreconditionError(absl::StrCat("agent '", req.agent_id().substr(0, 128),
                                                      "': this master's resource manager is slurm; it runs no agents"));
  }
  DET_RETURN_IF_ERROR(CheckAgentPool(options_.resource_pools, req.agent_id(),
                                     req.resource_pool().empty() ? "default" : req.resource_pool()));
  DET_ASSIGN_OR_RETURN(std::shared_ptr<const AbiManifest> manifest, ReportedManifest(req));
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto it = agents_.find(req.agent_id());
  const bool connected = it != agents_.end() && it->second->connected;
  if (connected && (req.previous_session_token().empty() ||
                    req.previous_session_token() != it->second->session_token)) {
    return absl::AlreadyExistsError(absl::StrCat("agent '", req.agent_id(),
                                                 "' is already connected; choose another --id"));
  }
  // A known agent id proves it is the same agent (its credential), before
  // anything about it changes; the cluster secret alone is not enough.
  std::optional<AgentRow> stored;
  if (it == agents_.end()) {
    DET_ASSIGN_OR_RETURN(stored, store_->GetAgent(req.agent_id()));
  }
  const std::string known_hash = it != agents_.end() ? it->second->row.credential_sha256
                                                     : (stored ? stored->credential_sha256 : "");
  DET_RETURN_IF_ERROR(CheckAgentCredential(req, known_hash));
  if (connected) {
    // The same agent whose stream broke: what it runs is reconciled below.
    if (it->second->session) it->second->session->Close();
    it->second->session.reset();
    it->second->connected = false;
  }
  if (it == agents_.end()) {
    it = agents_.emplace(req.agent_id(), std::make_unique<AgentRuntime>()).first;
    if (stored) it->second->row = *stored;  // enabled, registered_ms, credential
  }
  AgentRuntime& agent = *it->second;
  std::string issued;
  if (agent.row.credential_sha256.empty()) {
    issued = RandomHex(32);
    agent.row.credential_sha256 = Sha256Hex(issued);
  }
  agent.row.id = req.agent_id();
  agent.row.hostname = req.hostname();
  agent.row.resource_pool = req.resource_pool().empty() ? "default" : req.resource_pool();
  agent.row.version = req.version();
  if (agent.row.registered_ms == 0) agent.row.registered_ms = WallMs();
  agent.row.last_seen_ms = WallMs();
  agent.devices.assign(req.devices().begin(), req.devices().end());
  agent.addresses.assign(req.addresses().begin(), req.addresses().end());
  agent.abi_manifest = std::move(manifest);
  if (req.rendezvous_ports().first() != 0 || req.rendezvous_ports().last() != 0) {
    agent.rendezvous_first = req.rendezvous_ports().first();
    agent.rendezvous_last = req.rendezvous_ports().last();
  }
  agent.session_token = RandomHex(16);
  agent.last_heartbeat_mono_ms = MonoMs();
  agent.last_heartbeat_ms = WallMs();
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : req.devices()) devices.push_back(nlohmann::json::parse(MessageToJson(d)));
  agent.row.devices_json = devices.dump();
  DET_RETURN_IF_ERROR(store_->UpsertAgent(agent.row));
  agentv1::RegisterAgentResponse resp;
  resp.set_session_token(agent.session_token);
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  resp.set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
  resp.set_cluster_id(cluster_id_);
  resp.set_enabled(agent.row.enabled);
  if (!issued.empty()) resp.set_agent_credential(issued);
  ReconcileAgentLocked(agent, req, &resp);
  spdlog::info("agent {} registered: {} slot(s) in pool {}", agent.row.id, agent.devices.size(), agent.row.resource_pool);
  return Committed(w, resp);
}

void MasterCore::ReconcileAgentLocked(AgentRuntime& agent, const agentv1::RegisterAgentRequest& req,
                                      agentv1::RegisterAgentResponse* resp) {
  // What both know is reattached and keeps its slots; what only the master
  // knows ended unseen and resumes from its checkpoint; what only the agent
  // runs is killed, and its slots stay taken until the agent reports it gone.
  std::set<std::string> running(req.running_allocation_ids().begin(), req.running_allocation_ids().end());
  std::vector<std::string> gone;
  for (const auto& [id, alloc] : allocations_) {
    if (!RunsOn(*alloc, agent.row.id)) continue;
    if (running.count(id)) {
      spdlog::info("agent {}: reattached allocation {} (trial {})", agent.row.id, id, alloc->trial_id);
    } else {
      gone.push_back(id);
    }
  }
  for (const auto& id : gone) {
    GiveUpAllocationLocked(id, agent.row.id, absl::StrCat("not running on agent ", agent.row.id, " when it registered"));
  }
  std::set<std::string> zombies;
  for (const auto& id : running) {
    if (allocations_.count(id)) continue;
    resp->add_kill_allocation_ids(id);
    zombies.insert(id);
  }
  agent.zombies = std::move(zombies);
  if (!agent.zombies.empty()) {
    spdlog::info("agent {}: killing {} allocation(s) the master does not run: {}", agent.row.id,
                 agent.zombies.size(), absl::StrJoin(agent.zombies, ", "));
  }
}

absl::Status MasterCore::ResetAgentCredential(const std::string& agent_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = agents_.find(agent_id);
  if (it != agents_.end()) it->second->row.credential_sha256.clear();
  return store_->ResetAgentCredential(agent_id);
}

absl::StatusOr<std::shared_ptr<AgentSession>> MasterCore::AttachAgent(const std::string& session_token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  for (auto& [id, agent] : agents_) {
    if (!session_token.empty() && agent->session_token == session_token) {
      if (agent->session) agent->session->Close();
      agent->session = std::make_shared<AgentSession>(id);
      agent->connected = true;
      agent->last_heartbeat_mono_ms = MonoMs();
      agent->last_heartbeat_ms = WallMs();
      ScheduleLocked();
      return Committed(w, agent->session);
    }
  }
  return absl::UnauthenticatedError("unknown agent session token; register first");
}

absl::Status MasterCore::AuthorizeArtifactFetch(const std::string& session_token, const std::string& sha256) {
  std::lock_guard<std::mutex> l(mu_);
  const AgentRuntime* agent = nullptr;
  for (const auto& [id, a] : agents_) {
    if (!session_token.empty() && a->session_token == session_token) agent = a.get();
  }
  if (agent == nullptr) return absl::UnauthenticatedError("unknown agent session token; register first");
  for (const auto& [id, alloc] : allocations_) {
    auto eit = experiments_.find(alloc->experiment_id);
    if (eit != experiments_.end() && eit->second->row.trial_so_sha256 == sha256 && RunsOn(*alloc, agent->row.id)) {
      return absl::OkStatus();
    }
  }
  spdlog::warn("agent {}: refused artifact {}: no allocation placed on it runs it", agent->row.id, sha256.substr(0, 64));
  return absl::PermissionDeniedError(
      absl::StrCat("agent '", agent->row.id, "' runs no allocation of artifact ", sha256.substr(0, 64)));
}

void MasterCore::DetachAgent(const std::shared_ptr<AgentSession>& session) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto it = agents_.find(session->agent_id());
  if (it == agents_.end() || it->second->session != session) return;
  // Its processes may well keep running: it has heartbeat_timeout_ms to come
  // back (reconnect or re-register) before its trials are rescheduled.
  spdlog::warn("agent {}: connection closed; its allocations wait {} ms for it to come back", it->first,
               options_.heartbeat_timeout_ms);
  it->second->connected = false;
  it->second->session.reset();
}

void MasterCore::HandleAgentMessage(const std::string& agent_id, const agentv1::AgentMessage& message) {
  // Anything naming an allocation counts only for one placed on this agent:
  // another agent's allocations and trials are not this agent's to end or
  // write logs for.
  if (message.has_logs()) {
    std::vector<TaskLogRow> rows;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = agents_.find(agent_id);
      if (it == agents_.end()) return;
      if (message.logs().logs_size() > options_.max_log_lines_per_message) {
        spdlog::warn("agent {}: {} log lines in one message; storing the first {}", agent_id,
                     message.logs().logs_size(), options_.max_log_lines_per_message);
      }
      for (const auto& log : message.logs().logs()) {
        if (static_cast<int>(rows.size()) >= options_.max_log_lines_per_message) break;
        const int64_t trial_id = PlacedTrial(allocations_, *it->second, log.allocation_id());
        if (trial_id <= 0) {
          RefuseAgentMessage(*it->second, absl::StrCat("log lines of allocation '", log.allocation_id(), "'"));
          continue;
        }
        TaskLogRow r;
        r.trial_id = trial_id;  // the master's, never the agent's word
        r.allocation_id = log.allocation_id();
        r.rank = log.has_rank() ? log.rank() : 0;
        r.time_ms = log.has_timestamp() ? TimeMs(log.timestamp()) : WallMs();
        r.level = apiv1::LogLevel_Name(log.level());
        r.stream = log.stdtype() == apiv1::STD_TYPE_STDERR ? "stderr" : "stdout";
        r.message = Utf8Sanitized(log.message());  // bytes: a hostile agent's too
        rows.push_back(std::move(r));
      }
    }
    if (!rows.empty()) {
      absl::Status st = store_->InsertTaskLogs(rows);
      if (!st.ok()) spdlog::error("storing logs: {}", st.ToString());
    }
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  // A stop the user asked for while the database could not be written goes
  // into this write too: the exit it caused is a kill, not a failure.
  ApplyUnrecordedStopsLocked();
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return;
  AgentRuntime& agent = *it->second;
  agent.last_heartbeat_mono_ms = MonoMs();
  agent.last_heartbeat_ms = WallMs();
  if (message.has_heartbeat()) HandleHeartbeatLocked(agent, message.heartbeat());
  if (message.has_process_state()) {
    const auto& ps = message.process_state();
    auto ait = allocations_.find(ps.allocation_id());
    if (ait == allocations_.end()) return;  // ended or given up: nothing to count
    if (!RankRunsOn(*ait->second, agent.row.id, ps.rank())) {
      RefuseAgentMessage(agent, absl::StrCat("a state change of rank ", ps.rank(), " of allocation '",
                                             ps.allocation_id(), "'"));
      return;
    }
    if (ps.state() == agentv1::PROCESS_STATE_TERMINATED) {
      if (!ait->second->terminated_ranks.insert(ps.rank()).second) return;  // counted already
      int code = ps.has_exit_code() ? ps.exit_code() : (ps.has_signal_number() ? 128 + ps.signal_number() : 1);
      std::string why = ps.has_signal_number() ? absl::StrCat("rank ", ps.rank(), " killed by signal ", ps.signal_number())
                                               : absl::StrCat("rank ", ps.rank(), " exited with code ", code);
      if (!ps.message().empty()) absl::StrAppend(&why, ": ", ps.message());
      OnProcessTerminated(ps.allocation_id(), code, why);
    }
  }
}

void MasterCore::HandleHeartbeatLocked(AgentRuntime& agent, const agentv1::Heartbeat& heartbeat) {
  std::set<std::string> running(heartbeat.running_allocation_ids().begin(), heartbeat.running_allocation_ids().end());
  for (auto z = agent.zombies.begin(); z != agent.zombies.end();) {
    z = running.count(*z) ? std::next(z) : agent.zombies.erase(z);
  }
  // An allocation the agent has not listed for a while (its start command
  // was lost with a broken stream) is given up.
  const int64_t now = MonoMs();
  const int64_t grace = std::max<int64_t>(5000, 3 * options_.heartbeat_interval_ms);
  std::vector<std::string> missing;
  for (auto& [id, alloc] : allocations_) {
    if (!RunsOn(*alloc, agent.row.id)) continue;
    if (running.count(id) || now - alloc->created_mono_ms < grace) {
      alloc->missing_since_mono_ms = 0;
    } else if (alloc->missing_since_mono_ms == 0) {
      alloc->missing_since_mono_ms = now;
    } else if (now - alloc->missing_since_mono_ms > grace) {
      missing.push_back(id);
    }
  }
  for (const auto& id : missing) {
    GiveUpAllocationLocked(id, agent.row.id, absl::StrCat("agent ", agent.row.id, " does not run it"));
  }
}

void MasterCore::LoseAgent(AgentRuntime& agent, const std::string& why) {
  spdlog::warn("agent {} lost: {}", agent.row.id, why);
  agent.connected = false;
  if (agent.session) agent.session->Close();
  agent.session.reset();
  // It must register again, reporting what it still runs (which is killed).
  agent.session_token.clear();
  std::vector<std::string> affected;
  for (const auto& [id, alloc] : allocations_) {
    if (RunsOn(*alloc, agent.row.id)) affected.push_back(id);
  }
  for (const auto& id : affected) {
    GiveUpAllocationLocked(id, agent.row.id, absl::StrCat("agent ", agent.row.id, " lost: ", why));
  }
}

absl::StatusOr<apiv1::GetAgentsResponse> MasterCore::GetAgents(const apiv1::GetAgentsRequest&) {
  std::lock_guard<std::mutex> l(mu_);
  apiv1::GetAgentsResponse resp;
  for (const auto& [id, a] : agents_) *resp.add_agents() = AgentProtoLocked(*a);
  return resp;
}

absl::StatusOr<apiv1::GetSlotsResponse> MasterCore::GetSlots(const apiv1::GetSlotsRequest&) {
  DET_ASSIGN_OR_RETURN(apiv1::GetAgentsResponse agents, GetAgents(apiv1::GetAgentsRequest()));
  apiv1::GetSlotsResponse resp;
  for (const auto& a : agents.agents()) {
    for (const auto& s : a.slots()) *resp.add_slots() = s;
  }
  return resp;
}

absl::StatusOr<std::vector<std::string>> MasterCore::CheckTrialAbiOnAgents(const std::string& sha256,
                                                                       const std::string& file_name,
                                                                       const std::string& pool) {
  std::vector<std::pair<std::string, std::shared_ptr<const AbiManifest>>> manifests;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, agent] : agents_) {
      if (agent->abi_manifest && agent->row.resource_pool == pool) manifests.emplace_back(id, agent->abi_manifest);
    }
  }
  DET_ASSIGN_OR_RETURN(std::string path, artifacts_.FilePath(sha256));
  DET_ASSIGN_OR_RETURN(ElfDynamicInfo trial, ReadElfDynamic(path, file_name));
  const bool checked = std::any_of(trial.undefined.begin(), trial.undefined.end(),
                                   [](const std::string& s) { return !AbiSymbolNamespace(s).empty(); });
  if (manifests.empty()) {
    // Under Slurm no agent runs det-trial: only det-cli's check applies.
    if (!checked || options_.resource_manager.slurm_managed()) return std::vector<std::string>();
    return std::vector<std::string>{absl::StrCat(
        "no agent of resource pool '", pool, "' has reported its libraries yet, so the master did not check ",
        file_name, " against LibTorch and the Trial SDK (det-cli checks it against its own before the upload)")};
  }
  absl::Status first;
  for (const auto& [id, m] : manifests) {
    absl::Status st = CheckTrialAbi(trial, *m, file_name,
                                    absl::StrCat("agent '", id, "' (", absl::StrJoin(m->libraries, ", "), ")"));
    if (st.ok()) return std::vector<std::string>();
    if (first.ok()) first = st;
  }
  if (manifests.size() == 1) return first;
  return absl::InvalidArgumentError(absl::StrCat(first.message(), "; none of the ", manifests.size(),
                                                 " agents of resource pool '", pool, "' can load it"));
}

}  // namespace det::master
