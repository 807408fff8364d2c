// MasterOptions: how det-master is configured (its flags, master/main.cc).
#ifndef DET_MASTER_CORE_MASTER_OPTIONS_H_
#define DET_MASTER_CORE_MASTER_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "master/core/clock.h"
#include "master/core/resource_pools.h"
#include "master/core/slurm_jobs.h"
#include "master/store/metric_limits.h"

namespace det::master {

struct MasterOptions {
  std::string data_dir = "det-master-data";
  std::string db_path;          // default <data_dir>/det.db
  std::string checkpoint_root;  // default <data_dir>/checkpoints (used when a config has no checkpoint_storage)
  // Where a config's checkpoint_storage (host_path/storage_path) may point,
  // besides checkpoint_root (always allowed). None may contain the data dir
  // or the database (Create fails).
  std::vector<std::string> checkpoint_storage_roots;
  std::string cluster_name = "det-cpp";
  int heartbeat_interval_ms = 1000;
  // An agent silent (or disconnected) this long is lost: its trials are
  // rescheduled elsewhere. After a master restart, an agent has this long to
  // re-register before the allocations it ran are given up.
  int heartbeat_timeout_ms = 15000;
  // A trial asked to stop (pause, cancel, kill, preemption) that has not
  // exited after this long is killed (SIGKILL through its agent).
  int64_t stop_timeout_ms = 60000;
  // Once a rank of a multi-rank allocation reaches the rendezvous, the
  // others have this long to reach it; then the allocation fails (counted as
  // a restart) and is killed.
  int64_t rendezvous_timeout_ms = 10 * 60 * 1000;
  // The largest trial.so (inline in CreateExperiment, or UploadArtifact).
  int64_t max_trial_so_bytes = 256 << 20;
  // Trial logs: each line at most max_log_line_bytes (longer: cut with a
  // marker), each trial at most max_trial_log_bytes (over it: its oldest
  // lines dropped, with a marker line), each message of log lines (from a
  // trial or an agent) at most max_log_lines_per_message lines.
  int64_t max_log_line_bytes = 64 << 10;
  int64_t max_trial_log_bytes = 64 << 20;
  int max_log_lines_per_message = 10000;
  // Metrics: name length, values per reported row, distinct names and bytes
  // per trial (master/store/metric_limits.h); a report over one is refused.
  MetricLimits metric_limits;
  // Checkpoints: rows and bytes per trial, files and metadata bytes per
  // report (metric_limits.h); a report over one is refused.
  CheckpointLimits checkpoint_limits;
  // det-master --trial-uid-range FIRST-LAST: each det user's trials run as
  // a uid of this range (uid = gid) recorded per user when first needed
  // (Store::AgentIdsOfUser) and sent in StartAllocation.run_as_uid. 0-0:
  // none (the agents' --trial-user, one uid for all users).
  int64_t trial_uid_first = 0;
  int64_t trial_uid_last = 0;
  // The largest gRPC message and authenticated REST body the servers accept
  // (unauthenticated REST bodies: kMaxUnauthenticatedBodyBytes); larger
  // trial.so files go through UploadArtifact in 1 MiB chunks.
  int64_t max_message_bytes = 8 << 20;
  int64_t max_request_bytes() const { return max_message_bytes; }
  // det-master --backup-write-timeout-s: a BackupDatabase call whose client
  // has read nothing this long (a chunk unsent) is cancelled (database_backup.h).
  int backup_write_timeout_s = 60;
  // Every time the core reads (null: SystemClock).
  std::shared_ptr<const Clock> clock;
  // Runs the background pass (timeouts, scheduling, checkpoint GC) every
  // 500 ms on a thread of its own. false: only RunBackgroundPass() runs it
  // (tests with a FakeClock).
  bool background_thread = true;
  // Resource pools from det-master --resource-pools (none declared: one
  // pool "default" plus any pool an agent names).
  ResourcePoolsConfig resource_pools;
  // det-master --resource-manager FILE: agents (default) or Slurm
  // (slurm_jobs.h); with Slurm, job_storage_root defaults to
  // <data_dir>/slurm-jobs.
  ResourceManagerConfig resource_manager;
  // det-master --s3-credentials-file: the S3 profiles of checkpoint_storage
  // type s3 (s3_profiles.h); empty: none (an s3 config is refused).
  std::string s3_credentials_file;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_MASTER_OPTIONS_H_
