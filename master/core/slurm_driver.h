// The Slurm resource manager's I/O: writing an allocation's job directory,
// running sbatch, scancel and squeue, and reading the exit status each rank
// left. MasterCore decides (slurm_allocations.cc) under its lock and hands
// the work here to be done without it (RunSlurmPass).
#ifndef DET_MASTER_CORE_SLURM_DRIVER_H_
#define DET_MASTER_CORE_SLURM_DRIVER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "master/core/slurm_jobs.h"

namespace det::master {

struct CommandResult {
  int exit_code = 0;
  std::string out;  // stdout, at most 4 MiB
  std::string err;  // stderr, at most 64 KiB
};

// Runs a command (argv[0] found on PATH) and collects its output.
// Implementations are thread-safe.
class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Internal when it cannot be started or runs longer than 60 s (killed).
  virtual absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv) = 0;
};

// fork/exec with pipes.
std::shared_ptr<CommandRunner> MakeProcessRunner();

// One allocation to submit: its job directory's files and the script.
struct SlurmSubmission {
  std::string allocation_id;
  std::string job_dir;
  std::string script;
  std::string job_json;       // job.json: master address, allocation id, token (0600)
  std::string trial_so_path;  // copied to job_dir/trial.so
  int ntasks = 1;
};

// What one pass does, decided under the core's lock.
struct SlurmWork {
  std::vector<SlurmSubmission> submit;
  std::vector<std::string> cancel_job_names;  // scancel --name (job ids may not be known yet)
  // Allocations to look up in squeue: allocation id -> (job dir, ranks).
  struct Poll {
    std::string job_dir;
    int ntasks = 1;
  };
  std::map<std::string, Poll> poll;
};

// What the pass saw.
struct SlurmResults {
  // Allocation id -> job id (sbatch answered) or the error.
  std::map<std::string, std::string> submitted;
  std::map<std::string, std::string> submit_errors;
  bool squeue_ok = false;
  std::string squeue_error;
  // Allocation id -> its job as squeue shows it (absent: not listed).
  std::map<std::string, SqueueJob> listed;
  // Allocation id -> each rank's exit status (read for jobs that ended or
  // are not listed).
  std::map<std::string, std::vector<std::optional<int>>> exit_codes;
};

// Performs a pass's work. Thread-compatible (one pass at a time).
class SlurmDriver {
 public:
  SlurmDriver(SlurmConfig config, std::shared_ptr<CommandRunner> runner);
  SlurmResults Run(const SlurmWork& work);

 private:
  std::string Bin(const char* name) const;
  absl::StatusOr<std::string> Submit(const SlurmSubmission& s);

  const SlurmConfig config_;
  std::shared_ptr<CommandRunner> runner_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_SLURM_DRIVER_H_
