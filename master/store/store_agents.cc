// Store: the agents and allocations tables.
#include "master/store/store.h"

#include <sqlite3.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;
using store_internal::ColText;

#define DET_ALLOCATION_COLUMNS \
  "id, trial_id, experiment_id, token, placements_json, processes, terminated, created_ms, slurm_job_id"
#define DET_AGENT_COLUMNS \
  "id, hostname, resource_pool, devices_json, version, enabled, registered_ms, last_seen_ms, credential_sha256, " \
  "draining, disabled_slots_json"

constexpr char kUpsertAgent[] =
    "INSERT INTO agents(" DET_AGENT_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET hostname = excluded.hostname, "
    "resource_pool = excluded.resource_pool, devices_json = excluded.devices_json, "
    "version = excluded.version, enabled = excluded.enabled, "
    "registered_ms = excluded.registered_ms, last_seen_ms = excluded.last_seen_ms, "
    "credential_sha256 = excluded.credential_sha256, draining = excluded.draining, "
    "disabled_slots_json = excluded.disabled_slots_json";
constexpr char kUpsertAllocation[] =
    "INSERT INTO allocations(" DET_ALLOCATION_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET trial_id = excluded.trial_id, experiment_id = excluded.experiment_id, "
    "token = excluded.token, placements_json = excluded.placements_json, processes = excluded.processes, "
    "terminated = excluded.terminated, created_ms = excluded.created_ms, slurm_job_id = excluded.slurm_job_id";
constexpr char kDeleteAllocation[] = "DELETE FROM allocations WHERE id = ?";
constexpr char kListAllocations[] = "SELECT " DET_ALLOCATION_COLUMNS " FROM allocations ORDER BY created_ms, id";

constexpr char kListAgents[] = "SELECT " DET_AGENT_COLUMNS " FROM agents ORDER BY id";
constexpr char kGetAgent[] = "SELECT " DET_AGENT_COLUMNS " FROM agents WHERE id = ?";
constexpr char kResetAgentCredential[] = "UPDATE agents SET credential_sha256 = '' WHERE id = ?";

AllocationRow ReadAllocation(sqlite3_stmt* s) {
  AllocationRow r;
  r.id = ColText(s, 0);
  r.trial_id = ColInt(s, 1);
  r.experiment_id = ColInt(s, 2);
  r.token = ColText(s, 3);
  r.placements_json = ColText(s, 4);
  r.processes = ColInt(s, 5);
  r.terminated = ColInt(s, 6);
  r.created_ms = ColInt(s, 7);
  r.slurm_job_id = ColText(s, 8);
  return r;
}

AgentRow ReadAgent(sqlite3_stmt* s) {
  AgentRow r;
  r.id = ColText(s, 0);
  r.hostname = ColText(s, 1);
  r.resource_pool = ColText(s, 2);
  r.devices_json = ColText(s, 3);
  r.version = ColText(s, 4);
  r.enabled = ColInt(s, 5) != 0;
  r.registered_ms = ColInt(s, 6);
  r.last_seen_ms = ColInt(s, 7);
  r.credential_sha256 = ColText(s, 8);
  r.draining = ColInt(s, 9) != 0;
  r.disabled_slots_json = ColText(s, 10);
  return r;
}

}  // namespace

// ---- Agents ----

absl::Status Store::UpsertAgent(const AgentRow& row) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpsertAgent));
    Binder b(st.get());
    b.Text(row.id)
        .Text(row.hostname)
        .Text(row.resource_pool)
        .Text(row.devices_json)
        .Text(row.version)
        .Int(row.enabled ? 1 : 0)
        .Int(row.registered_ms)
        .Int(row.last_seen_ms)
        .Text(row.credential_sha256)
        .Int(row.draining ? 1 : 0)
        .Text(row.disabled_slots_json);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("upsert agent ", row.id));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<AgentRow>> Store::ListAgents() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListAgents));
  std::vector<AgentRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadAgent(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list agents");
  return out;
}

absl::StatusOr<std::optional<AgentRow>> Store::GetAgent(const std::string& id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetAgent));
  Binder b(st.get());
  b.Text(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<AgentRow>();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get agent ", id));
  return std::optional<AgentRow>(ReadAgent(st.get()));
}

absl::Status Store::ResetAgentCredential(const std::string& id) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kResetAgentCredential));
    Binder b(st.get());
    b.Text(id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent id");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("reset credential of agent ", id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("agent '", id, "' not found"));
    return absl::OkStatus();
  });
}

// ---- Allocations ----

absl::Status Store::UpsertAllocation(const AllocationRow& row) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpsertAllocation));
    Binder b(st.get());
    b.Text(row.id)
        .Int(row.trial_id)
        .Int(row.experiment_id)
        .Text(row.token)
        .Text(row.placements_json)
        .Int(row.processes)
        .Int(row.terminated)
        .Int(row.created_ms)
        .Text(row.slurm_job_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind allocation");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot store allocation ", row.id, ": trial ", row.trial_id, " not found"));
    }
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("upsert allocation ", row.id));
    return absl::OkStatus();
  });
}

absl::Status Store::DeleteAllocation(const std::string& id) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteAllocation));
    Binder b(st.get());
    b.Text(id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind allocation id");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete allocation ", id));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<AllocationRow>> Store::ListAllocations() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListAllocations));
  std::vector<AllocationRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadAllocation(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list allocations");
  return out;
}

}  // namespace master
}  // namespace det
