// MasterCore: the det.api.v1 calls that change or read a checkpoint's files
// and metadata: DeleteCheckpoints, PatchCheckpoint, and opening a checkpoint
// for DownloadCheckpoint; deleting checkpoints' files (shared_fs or s3) for
// GC, DeleteCheckpoints and experiment delete.
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/proto_json.h"
#include "common/s3/s3_checkpoint.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "master/core/checkpoint_files_s3.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/store/store_events.h"

namespace det::master {
namespace {

constexpr int kMaxDeleteUuids = 1000;
constexpr int kMaxMetadataKeys = 100;
constexpr size_t kMaxMetadataKeyBytes = 256;
constexpr size_t kMaxMetadataBytes = 64 << 10;

absl::StatusOr<CheckpointRow> FindCheckpoint(Store& store, const std::string& uuid, absl::string_view field) {
  DET_RETURN_IF_ERROR(ValidateUuid(uuid, field));
  auto row = store.GetCheckpoint(uuid);
  if (absl::IsNotFound(row.status())) return absl::NotFoundError(absl::StrCat("checkpoint '", uuid, "' not found"));
  return row;
}

}  // namespace

absl::StatusOr<apiv1::DeleteCheckpointsResponse> MasterCore::DeleteCheckpoints(
    const apiv1::DeleteCheckpointsRequest& req) {
  if (req.checkpoint_uuids().empty()) return absl::InvalidArgumentError("checkpoint_uuids: at least one is needed");
  if (req.checkpoint_uuids_size() > kMaxDeleteUuids) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_uuids: ", req.checkpoint_uuids_size(), " uuids; at most ", kMaxDeleteUuids));
  }
  std::vector<CheckpointRow> doomed;
  {
    std::lock_guard<std::mutex> l(mu_);
    WriteScope w(this);
    std::set<std::string> seen;
    // Everything is checked before anything changes: all or nothing.
    for (const std::string& uuid : req.checkpoint_uuids()) {
      if (!seen.insert(uuid).second) continue;
      DET_ASSIGN_OR_RETURN(CheckpointRow row, FindCheckpoint(*store_, uuid, "checkpoint_uuids"));
      if (row.state == "DELETED") continue;
      auto tit = trials_.find(row.trial_id);
      if (tit != trials_.end() && tit->second->row.latest_checkpoint_uuid == uuid &&
          (!Terminal(tit->second->row.state) || !tit->second->allocation_id.empty())) {
        return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, " is the latest checkpoint of trial ",
                                                          row.trial_id, ", which is ", tit->second->row.state,
                                                          " and needs it to resume"));
      }
      if (int64_t user = WarmStartUserLocked(uuid)) {
        return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, " is the warm-start source of experiment ",
                                                          user, ", which is not finished"));
      }
      doomed.push_back(std::move(row));
    }
    for (const CheckpointRow& c : doomed) {
      DET_RETURN_IF_ERROR(store_->UpdateCheckpointState(c.uuid, "DELETED"));
      auto tit = trials_.find(c.trial_id);
      if (tit != trials_.end()) ForgetTrialFactsLocked(*tit->second);  // its best checkpoint may have gone
    }
    // A finished trial whose latest checkpoint went falls back to its newest
    // remaining completed one (or none), so `experiment continue` and the
    // trial's page never name a deleted checkpoint.
    for (const CheckpointRow& c : doomed) {
      auto tit = trials_.find(c.trial_id);
      if (tit == trials_.end() || tit->second->row.latest_checkpoint_uuid != c.uuid) continue;
      DET_ASSIGN_OR_RETURN(std::vector<CheckpointRow> left, store_->ListCheckpoints(std::nullopt, c.trial_id));
      std::string fallback;
      int64_t best_batches = -1;
      for (const CheckpointRow& r : left) {
        if (r.state != "COMPLETED" || seen.count(r.uuid) || r.total_batches < best_batches) continue;
        best_batches = r.total_batches;
        fallback = r.uuid;
      }
      tit->second->row.latest_checkpoint_uuid = fallback;
      SetTrialState(*tit->second, tit->second->row.state);
    }
    DET_RETURN_IF_ERROR(w.Commit());
  }
  DeleteCheckpointDirs(doomed, CheckpointDeletion::kUser, "DeleteCheckpoints");
  if (!doomed.empty()) spdlog::info("DeleteCheckpoints: deleted {} checkpoint(s)", doomed.size());
  return apiv1::DeleteCheckpointsResponse();
}

absl::StatusOr<apiv1::PatchCheckpointResponse> MasterCore::PatchCheckpoint(const apiv1::PatchCheckpointRequest& req) {
  if (req.metadata().fields_size() > kMaxMetadataKeys || req.remove_keys_size() > kMaxMetadataKeys) {
    return absl::InvalidArgumentError(absl::StrCat("metadata, remove_keys: at most ", kMaxMetadataKeys, " keys each"));
  }
  for (const auto& [key, value] : req.metadata().fields()) {
    if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("metadata: key '", key.substr(0, 64), "' must be 1..",
                                                     kMaxMetadataKeyBytes, " bytes"));
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(CheckpointRow row, FindCheckpoint(*store_, req.checkpoint_uuid(), "checkpoint_uuid"));
  nlohmann::json meta = nlohmann::json::parse(row.metadata_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) meta = nlohmann::json::object();
  const nlohmann::json changes = StructToJson(req.metadata());  // alive while items() is iterated
  for (const auto& [key, value] : changes.items()) meta[key] = value;
  for (const std::string& key : req.remove_keys()) meta.erase(key);
  row.metadata_json = meta.dump();
  if (row.metadata_json.size() > kMaxMetadataBytes) {
    return absl::InvalidArgumentError(absl::StrCat("metadata: ", row.metadata_json.size(),
                                                   " bytes as JSON once changed; at most ", kMaxMetadataBytes));
  }
  DET_RETURN_IF_ERROR(store_->UpdateCheckpointMetadata(row.uuid, row.metadata_json));
  CompleteCheckpointRowLocked(&row);
  apiv1::PatchCheckpointResponse resp;
  *resp.mutable_checkpoint() = CheckpointProto(row);
  return Committed(w, std::move(resp));
}

absl::StatusOr<std::unique_ptr<CheckpointFiles>> MasterCore::OpenCheckpointFiles(
    const apiv1::DownloadCheckpointRequest& req) {
  DET_ASSIGN_OR_RETURN(CheckpointRow row, FindCheckpoint(*store_, req.checkpoint_uuid(), "checkpoint_uuid"));
  if (row.state != "COMPLETED") {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", row.uuid, " is ", row.state, ", not COMPLETED: nothing to download"));
  }
  if (!s3::IsS3Url(row.storage_path)) return CheckpointFiles::Open(checkpoint_roots_, row);
  absl::StatusOr<ResolvedS3Storage> storage;
  {
    std::lock_guard<std::mutex> l(mu_);
    storage = ExperimentS3StorageLocked(row.experiment_id);
  }
  // Outside mu_: the manifest is read before the first chunk.
  DET_RETURN_IF_ERROR(storage.status());
  DET_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Client> client, NewS3Client(*storage));
  return OpenS3CheckpointFiles(std::move(client), storage->location, row);
}

absl::StatusOr<ResolvedS3Storage> MasterCore::ExperimentS3StorageLocked(int64_t id, std::string* workspace) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is not loaded: its S3 storage is unknown"));
  }
  const ExperimentRuntime& exp = *it->second;
  if (!exp.config.checkpoint_storage || exp.config.checkpoint_storage->type != "s3") {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, "'s checkpoint_storage is not s3"));
  }
  // Its workspace, which the profile must (still) allow.
  DET_ASSIGN_OR_RETURN(ProjectRow project, store_->GetProject(exp.row.project_id));
  if (workspace != nullptr) *workspace = project.workspace_name;
  return s3_profiles_.Resolve(*exp.config.checkpoint_storage, project.workspace_name);
}

void MasterCore::DeleteCheckpointDirs(const std::vector<CheckpointRow>& doomed, CheckpointDeletion why,
                                      const std::string& who) {
  struct S3Target {
    std::unique_ptr<s3::S3Client> client;
    s3::S3Location location;
    CheckpointStorageConfig config;  // what a retry re-resolves (no secret)
    std::string workspace;
  };
  std::map<int64_t, absl::StatusOr<S3Target>> s3_targets;  // one client per experiment
  auto target_of = [&](int64_t experiment_id) -> absl::StatusOr<S3Target> {
    absl::StatusOr<ResolvedS3Storage> storage;
    S3Target target;
    {
      std::lock_guard<std::mutex> l(mu_);
      storage = ExperimentS3StorageLocked(experiment_id, &target.workspace);
      if (storage.ok()) target.config = *experiments_.at(experiment_id)->config.checkpoint_storage;
    }
    DET_RETURN_IF_ERROR(storage.status());
    DET_ASSIGN_OR_RETURN(target.client, NewS3Client(*storage));
    target.location = storage->location;
    return target;
  };
  for (const CheckpointRow& c : doomed) {
    absl::Status st;
    bool deleted = true;  // a shared_fs directory already gone is OK, as before
    if (s3::IsS3Url(c.storage_path)) {
      auto it = s3_targets.find(c.experiment_id);
      if (it == s3_targets.end()) it = s3_targets.emplace(c.experiment_id, target_of(c.experiment_id)).first;
      absl::StatusOr<int64_t> objects =
          it->second.ok() ? DeleteS3CheckpointRow(*it->second->client, it->second->location, c)
                          : absl::StatusOr<int64_t>(it->second.status());
      st = objects.status();
      deleted = objects.ok() && *objects > 0;
      // Retried by the background pass (RetryS3Deletes) until it succeeds.
      if (!st.ok() && it->second.ok()) {
        s3_delete_retries_.Add(c, it->second->config, it->second->workspace, MonoMs());
      }
    } else {
      st = checkpoint_roots_.RemoveCheckpoint(c.storage_path, c.uuid);
    }
    if (!st.ok()) spdlog::warn("{}: not deleting {}: {}", who, c.storage_path, st.ToString());
    StoreEvents* e = CurrentStoreEvents();
    if (st.ok() && deleted && e != nullptr && c.state != "DELETED") e->CheckpointBytesDeleted(why, CheckpointBytes(c));
  }
}

void MasterCore::RetryS3Deletes() {
  std::vector<S3DeleteRetry> due = s3_delete_retries_.TakeDue(MonoMs(), S3DeleteRetries::kMaxPerPass);
  bool failed = false;  // after a failure the rest wait for the next pass
  for (S3DeleteRetry& r : due) {
    if (failed) {
      s3_delete_retries_.Restore(std::move(r));
      continue;
    }
    // Re-resolved now: the credentials are the profile's, never the entry's.
    absl::StatusOr<int64_t> objects = [&]() -> absl::StatusOr<int64_t> {
      DET_ASSIGN_OR_RETURN(ResolvedS3Storage storage, s3_profiles_.Resolve(r.storage, r.workspace));
      DET_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Client> client, NewS3Client(storage));
      return DeleteS3CheckpointRow(*client, storage.location, r.row);
    }();
    if (objects.ok()) {
      s3_delete_retries_.Succeeded();
      spdlog::info("S3 delete retry: deleted {} ({} object(s))", r.row.storage_path, *objects);
      continue;
    }
    failed = true;
    const std::string path = r.row.storage_path;
    int64_t backoff = s3_delete_retries_.Again(std::move(r), MonoMs());
    spdlog::warn("S3 delete retry: not deleting {}: {}; next try in {} s", path, objects.status().ToString(),
                 backoff / 1000);
  }
}

}  // namespace det::master
