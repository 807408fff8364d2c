// The Slurm resource manager's pure parts: its config (the master's
// `resource_manager:` section), the batch script of an allocation, what
// sbatch and squeue print, and what a job's end means for its ranks.
//
//   resource_manager:
//     type: slurm                 # or agent (the default: det-agents on every node)
//     partition_pools:            # resource pool -> Slurm partition
//       default: debug            # (none: every pool uses Slurm's default partition)
//     gpu_partitions: [gpu]       # partitions whose slots are GPUs (--gres=gpu:N)
//     gpus_per_node: 8            # most GPUs one node gives a job
//     job_storage_root: /shared/det-jobs   # batch scripts, job files, trial.so; must be
//                                          # visible on the nodes (default DATA_DIR/slurm-jobs)
//     det_trial: /opt/det/bin/det-trial    # det-trial on the nodes (default: beside det-master)
//     master_address: head:8090   # how ranks reach the master (default --advertise-address)
//     time_limit_minutes: 1440    # each job's --time
//     rendezvous_ports: {first: 29600, last: 29699}   # chief ports of multi-rank jobs
//     slurm_bin_dir: /usr/bin     # where sbatch, squeue, scancel are (default: PATH)
//
// Everything here is pure and thread-compatible (no I/O).
#ifndef DET_MASTER_CORE_SLURM_JOBS_H_
#define DET_MASTER_CORE_SLURM_JOBS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::master {

class CommandRunner;  // slurm_driver.h

inline constexpr int64_t kMaxResourceManagerFileBytes = 1 << 20;
inline constexpr int kMaxSlurmPartitions = 256;
// The placements' agent id of an allocation run as a Slurm job (no agent may
// register under it while the Slurm resource manager is in use).
inline constexpr char kSlurmAgentId[] = "slurm";

enum class ResourceManagerType { kAgent, kSlurm };

struct SlurmConfig {
  std::map<std::string, std::string> partition_pools;  // pool -> partition
  std::vector<std::string> gpu_partitions;
  int gpus_per_node = 8;
  std::string job_storage_root;  // "" : <data_dir>/slurm-jobs
  std::string det_trial;         // "" : det-trial beside det-master
  std::string master_address;    // "" : the master's trial address
  int time_limit_minutes = 1440;
  int rendezvous_first = 29600;
  int rendezvous_last = 29699;
  std::string slurm_bin_dir;  // "" : PATH
  // How often squeue is asked (the background pass runs every 500 ms).
  int poll_interval_ms = 1000;
};

struct ResourceManagerConfig {
  ResourceManagerType type = ResourceManagerType::kAgent;
  SlurmConfig slurm;
  // Runs sbatch/squeue/scancel (null: real processes). Tests inject a fake.
  std::shared_ptr<CommandRunner> runner;

  bool slurm_managed() const { return type == ResourceManagerType::kSlurm; }
};

// Parses a master config file holding `resource_manager:` (other top-level
// keys of Determined's master.yaml are ignored); `source_name` prefixes
// errors, which are InvalidArgument naming the line and field. A missing
// section is type agent.
absl::StatusOr<ResourceManagerConfig> ParseResourceManagerConfig(std::string_view yaml_text,
                                                                 std::string_view source_name);
// Reads (at most kMaxResourceManagerFileBytes) and parses `path`.
absl::StatusOr<ResourceManagerConfig> LoadResourceManagerFile(const std::string& path);

// What one allocation's job runs.
struct SlurmJobSpec {
  std::string allocation_id;  // [A-Za-z0-9._-] (the master's own ids)
  std::string job_dir;        // absolute; holds job.json, trial.so, exit.<rank>
  std::string partition;      // "" : Slurm's default
  int ntasks = 1;             // slots_per_trial (at least 1)
  bool gpus = false;          // a GPU partition: one GPU per rank
  int gpus_per_node = 8;
  int time_limit_minutes = 1440;
  std::string det_trial;      // path of det-trial on the nodes
};

// "det-<allocation id>": the job's name, by which a restarted master finds
// a job whose id it did not store.
std::string SlurmJobName(const std::string& allocation_id);
// The allocation id of a job name made by SlurmJobName ("" for others).
std::string AllocationOfJobName(const std::string& job_name);

// The batch script: ntasks ranks (--gres for GPU partitions, --time,
// --partition), each `det-trial --managed --slurm-job-file DIR/job.json
// DIR/trial.so` through srun, whose exit status lands in DIR/exit.<rank>;
// the chief's address is the job's first node. InvalidArgument for an id or
// path that cannot be quoted safely or a GPU request that does not divide
// into nodes.
absl::StatusOr<std::string> SlurmBatchScript(const SlurmJobSpec& spec);

// The job id `sbatch --parsable` printed ("123" or "123;cluster").
absl::StatusOr<std::string> ParseSbatchOutput(const std::string& out);

// One line of `squeue -h -t all -o '%i|%j|%T|%r'`.
struct SqueueJob {
  std::string job_id;
  std::string name;
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
  std::string reason;  // why pending (Resources, Priority, ...)
};
// By job name; malformed lines are skipped. At most 100,000 lines read.
std::map<std::string, SqueueJob> ParseSqueue(const std::string& out);

// Where a job stands for the master.
enum class SlurmPhase { kPending, kRunning, kEnded };
SlurmPhase PhaseOfState(const std::string& state);

// How one rank of an ended job ended.
struct RankEnd {
  int exit_code = 0;  // 128+signal when killed
  std::string why;
  bool lost = false;  // the master cannot tell: resumed without a restart
};
// The ranks' ends of a job that `listed` (nullopt: squeue no longer shows
// it) as having ended, from the exit codes the ranks left (exit_codes[r],
// nullopt when rank r left none: it never ran or was killed with its shell).
std::vector<RankEnd> DecideRankEnds(const std::optional<SqueueJob>& listed,
                                    const std::vector<std::optional<int>>& exit_codes);

}  // namespace det::master

#endif  // DET_MASTER_CORE_SLURM_JOBS_H_
