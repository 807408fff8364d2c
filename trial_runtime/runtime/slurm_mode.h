// det-trial --managed --slurm-job-file FILE TRIAL.so: one rank of an
// allocation that det-master's Slurm resource manager runs as a Slurm job
// (srun starts one per task; no det-agent on the node).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_SLURM_MODE_H_
#define DET_TRIAL_RUNTIME_RUNTIME_SLURM_MODE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace det::runtime {

// What the master wrote for the job (job.json, readable by the job's user
// only): where the master is, the allocation and its token, the chief's port.
struct SlurmJobFile {
  std::string master;
  std::string allocation_id;
  std::string token;
  int chief_port = 0;
  bool debug = false;
};

// Reads `path` (at most 64 KiB, a JSON object with string master,
// allocation_id, token and integer chief_port). InvalidArgument naming the
// file and field otherwise.
absl::StatusOr<SlurmJobFile> ReadSlurmJobFile(const std::string& path);

// The DET_* variables of a rank from Slurm's (SLURM_PROCID, SLURM_LOCALID,
// SLURM_NTASKS, SLURM_NODEID, SLURM_JOB_NUM_NODES, SLURM_TASKS_PER_NODE) and
// the job file; DET_CHIEF_ADDR is the batch script's (the job's first node).
// InvalidArgument naming a missing or malformed variable. Pure.
absl::StatusOr<std::map<std::string, std::string>> RankEnvironmentFromSlurm(
    const std::map<std::string, std::string>& slurm_env, const SlurmJobFile& job);

// Runs the rank: sets the DET_* variables, ships this process's stdout and
// stderr lines to the master (ReportTrialLogs with the allocation token;
// they still reach the job's output file) and runs it as --managed does.
// Returns the exit code.
int RunSlurmManaged(const std::string& job_file, const std::string& trial_path, int threads);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_SLURM_MODE_H_
