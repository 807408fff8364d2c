// Store: the experiments table.
#include "master/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColDouble;
using store_internal::ColInt;
using store_internal::ColOptDouble;
using store_internal::ColOptInt;
using store_internal::ColText;
using store_internal::Dump;
using store_internal::ParseJson;
using store_internal::Placeholders;
using store_internal::SqlLimit;

#define DET_EXPERIMENT_COLUMNS                                                                 \
  "id, name, description, labels, state, config_yaml, config_json, trial_so_sha256, "          \
  "searcher_state_json, owner, archived, progress, created_ms, ended_ms, checkpoint_gc_policy_json, "   \
  "parent_id, warm_start_checkpoint_uuid, job_priority, job_weight, job_max_slots, job_queue_position, project_id"

constexpr char kInsertExperiment[] =
    "INSERT INTO experiments(name, description, labels, state, config_yaml, config_json, "
    "trial_so_sha256, searcher_state_json, owner, archived, progress, created_ms, ended_ms, "
    "checkpoint_gc_policy_json, parent_id, warm_start_checkpoint_uuid, project_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateExperiment[] =
    "UPDATE experiments SET name = ?, description = ?, labels = ?, state = ?, config_yaml = ?, "
    "config_json = ?, trial_so_sha256 = ?, searcher_state_json = ?, owner = ?, archived = ?, "
    "progress = ?, ended_ms = ?, checkpoint_gc_policy_json = ?, job_priority = ?, job_weight = ?, "
    "job_max_slots = ?, job_queue_position = ? WHERE id = ?";
constexpr char kGetExperiment[] = "SELECT " DET_EXPERIMENT_COLUMNS " FROM experiments WHERE id = ?";

std::string EncodeLabels(const std::vector<std::string>& labels) { return Dump(nlohmann::json(labels)); }

absl::StatusOr<std::vector<std::string>> DecodeLabels(const std::string& text) {
  DET_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, "experiment labels"));
  if (!j.is_array()) return absl::DataLossError(absl::StrCat("stored experiment labels are not an array: ", text));
  std::vector<std::string> out;
  out.reserve(j.size());
  for (const auto& e : j) {
    if (!e.is_string()) return absl::DataLossError(absl::StrCat("stored experiment label is not a string: ", text));
    out.push_back(e.get<std::string>());
  }
  return out;
}

absl::StatusOr<ExperimentRow> ReadExperiment(sqlite3_stmt* s) {
  ExperimentRow r;
  r.id = ColInt(s, 0);
  r.name = ColText(s, 1);
  r.description = ColText(s, 2);
  DET_ASSIGN_OR_RETURN(r.labels, DecodeLabels(ColText(s, 3)));
  r.state = ColText(s, 4);
  r.config_yaml = ColText(s, 5);
  r.config_json = ColText(s, 6);
  r.trial_so_sha256 = ColText(s, 7);
  r.searcher_state_json = ColText(s, 8);
  r.owner = ColText(s, 9);
  r.archived = ColInt(s, 10) != 0;
  r.progress = ColDouble(s, 11);
  r.created_ms = ColInt(s, 12);
  r.ended_ms = ColInt(s, 13);
  r.checkpoint_gc_policy_json = ColText(s, 14);
  r.parent_id = ColInt(s, 15);
  r.warm_start_checkpoint_uuid = ColText(s, 16);
  r.job_priority = ColOptInt(s, 17);
  r.job_weight = ColOptDouble(s, 18);
  r.job_max_slots = ColOptInt(s, 19);
  r.job_queue_position = ColOptDouble(s, 20);
  r.project_id = ColInt(s, 21);
  return r;
}

// The WHERE clause for `f` and the texts it binds, in order.
std::string ExperimentWhere(const ExperimentFilter& f, std::vector<std::string>* binds) {
  std::vector<std::string> conds;
  if (!f.states.empty()) {
    conds.push_back(absl::StrCat("state IN (", Placeholders(f.states.size()), ")"));
    binds->insert(binds->end(), f.states.begin(), f.states.end());
  }
  if (!f.name_contains.empty()) {
    conds.push_back("instr(name, ?) > 0");
    binds->push_back(f.name_contains);
  }
  if (!f.label.empty()) {
    conds.push_back("EXISTS (SELECT 1 FROM json_each(experiments.labels) WHERE json_each.value = ?)");
    binds->push_back(f.label);
  }
  if (!f.include_archived) conds.push_back("archived = 0");
  if (conds.empty()) return "";
  return absl::StrCat(" WHERE ", absl::StrJoin(conds, " AND "));
}

}  // namespace

// ---- Experiments ----

absl::StatusOr<int64_t> Store::InsertExperiment(const ExperimentRow& row) {
  const std::string labels = EncodeLabels(row.labels);
  return Write([&]() -> absl::StatusOr<int64_t> {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertExperiment));
    Binder b(st.get());
    b.Text(row.name)
        .Text(row.description)
        .Text(labels)
        .Text(row.state)
        .Text(row.config_yaml)
        .Text(row.config_json)
        .Text(row.trial_so_sha256)
        .Text(row.searcher_state_json)
        .Text(row.owner)
        .Int(row.archived ? 1 : 0)
        .Double(row.progress)
        .Int(row.created_ms)
        .Int(row.ended_ms)
        .Text(row.checkpoint_gc_policy_json)
        .Int(row.parent_id)
        .Text(row.warm_start_checkpoint_uuid)
        .Int(row.project_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, "insert experiment");
    return sqlite3_last_insert_rowid(db_);
  });
}

absl::Status Store::UpdateExperiment(const ExperimentRow& row) {
  const std::string labels = EncodeLabels(row.labels);
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateExperiment));
    Binder b(st.get());
    b.Text(row.name)
        .Text(row.description)
        .Text(labels)
        .Text(row.state)
        .Text(row.config_yaml)
        .Text(row.config_json)
        .Text(row.trial_so_sha256)
        .Text(row.searcher_state_json)
        .Text(row.owner)
        .Int(row.archived ? 1 : 0)
        .Double(row.progress)
        .Int(row.ended_ms)
        .Text(row.checkpoint_gc_policy_json)
        .OptInt(row.job_priority)
        .OptDouble(row.job_weight)
        .OptInt(row.job_max_slots)
        .OptDouble(row.job_queue_position)
        .Int(row.id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update experiment ", row.id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("experiment ", row.id, " not found"));
    return absl::OkStatus();
  });
}

absl::StatusOr<ExperimentRow> Store::GetExperiment(int64_t id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetExperiment));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get experiment ", id));
  return ReadExperiment(st.get());
}

absl::StatusOr<std::vector<ExperimentRow>> Store::ListExperiments(const ExperimentFilter& filter) {
  std::vector<std::string> binds;
  std::string sql = absl::StrCat("SELECT " DET_EXPERIMENT_COLUMNS " FROM experiments",
                                 ExperimentWhere(filter, &binds), " ORDER BY id", filter.order_desc ? " DESC" : "",
                                 " LIMIT ", SqlLimit(filter.limit), " OFFSET ", std::max<int64_t>(filter.offset, 0));
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& v : binds) b.Text(v);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment filter");
  std::vector<ExperimentRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(ExperimentRow row, ReadExperiment(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, "list experiments");
  return out;
}

absl::StatusOr<int64_t> Store::CountExperiments(const ExperimentFilter& filter) {
  std::vector<std::string> binds;
  std::string sql = absl::StrCat("SELECT COUNT(*) FROM experiments", ExperimentWhere(filter, &binds));
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& v : binds) b.Text(v);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment filter");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "count experiments");
  return ColInt(st.get(), 0);
}

}  // namespace master
}  // namespace det
