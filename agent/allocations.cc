// det::agent::Agent, part 2 of 3: allocations. Starting one (checks,
// device reservation, the trial.so from the cache, its directory and config,
// one det-trial process per rank with its environment), killing and
// signalling it, process exits, and reaping finished allocations.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/agent.h"
#include "agent/checkpoint_stage.h"
#include "agent/trial_env.h"
#include "common/config_reader.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;
namespace av1 = det::agent::v1;
namespace apiv1 = det::api::v1;

// The environment common to all ranks: the agent's own (without the
// cluster secret, which it never reads anyway) and the allocation's.
std::map<std::string, std::string> BaseEnvironment(const av1::StartAllocation& start) {
  std::map<std::string, std::string> env = AgentEnvironmentForTrials();
  for (const auto& [k, v] : start.env()) env[k] = v;
  return env;
}

// The variables the master asks for come from a user's config.
absl::Status ValidateStartEnv(const av1::StartAllocation& start) {
  DET_RETURN_IF_ERROR(ValidateTrialEnv(start.env(), "env"));
  for (int i = 0; i < start.processes_size(); ++i) {
    DET_RETURN_IF_ERROR(ValidateTrialEnv(start.processes(i).env(), absl::StrCat("processes[", i, "].env")));
  }
  return absl::OkStatus();
}

// Creates `dir` and writes the allocation's config.yaml into it; when
// `user` is set (the trial works there) both are owned by it, the directory
// mode 0700 (made so before the config is written: no other uid ever reads
// it) and the config 0600. Returns the config's path. Internal on an I/O
// error.
absl::StatusOr<std::string> WriteConfig(const std::string& dir, const std::string& config_yaml,
                                        const std::optional<RunAs>& user) {
  const fs::path config_path = fs::path(dir) / "config.yaml";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec && user && (chmod(dir.c_str(), 0700) != 0 || lchown(dir.c_str(), user->uid, user->gid) != 0)) {
    return absl::InternalError(absl::StrCat("cannot make ", dir, " uid ", user->uid, "'s (0700): ", std::strerror(errno)));
  }
  std::ofstream out(config_path, std::ios::trunc);
  out << config_yaml;
  out.close();
  if (ec || !out) {
    return absl::InternalError(
        absl::StrCat("cannot write ", config_path.string(), ec ? ": " + ec.message() : ""));
  }
  if (user && (chmod(config_path.c_str(), 0600) != 0 || lchown(config_path.c_str(), user->uid, user->gid) != 0)) {
    return absl::InternalError(absl::StrCat("cannot chown ", config_path.string(), " to uid ", user->uid, ": ",
                                            std::strerror(errno)));
  }
  return config_path.string();
}

// The allocation's directory made ready for its ranks: its config.yaml
// (WriteConfig) and, for a warm start from another user's checkpoint
// (StartAllocation.warm_start_source_path, sent only with run_as_uid), a
// copy of that checkpoint owned by `user`, named by DET_WARM_START_DIR in
// *env. Returns the config's path; the failure names what failed.
absl::StatusOr<std::string> PrepareAllocationDir(const av1::StartAllocation& start, const std::string& dir,
                                                 const std::optional<RunAs>& user,
                                                 std::map<std::string, std::string>* env) {
  absl::StatusOr<std::string> config_path = WriteConfig(dir, start.config_yaml(), user);
  if (!config_path.ok() || start.warm_start_source_path().empty() || !user) return config_path;
  // A checkpoint in S3 is downloaded by det-trial itself, with the
  // credentials the master hands it; there is no file here to copy.
  if (absl::StartsWith(start.warm_start_source_path(), "s3://")) return config_path;
  const std::string staged = (fs::path(dir) / "warm-start").string();
  absl::Status st = StageCheckpoint(start.warm_start_source_path(), staged, user->uid, user->gid,
                                    "StartAllocation.warm_start_source_path");
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("warm start: ", st.message()));
  (*env)["DET_WARM_START_DIR"] = staged;
  return config_path;
}

// The user every rank of `start` runs as: StartAllocation.run_as_uid/gid
// (the owner's own uid; no supplementary groups) when set, else
// `trial_user` (--trial-user, shared by all users). InvalidArgument for uid
// or gid 0; FailedPrecondition when the agent is not root.
absl::StatusOr<std::optional<RunAs>> RunAsFor(const av1::StartAllocation& start,
                                              const std::optional<RunAs>& trial_user) {
  if (!start.has_run_as_uid() && !start.has_run_as_gid()) return trial_user;
  if (start.run_as_uid() == 0 || start.run_as_gid() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("StartAllocation.run_as_uid ", start.run_as_uid(), " / run_as_gid ",
                                                   start.run_as_gid(), ": trials never run as root (0); link the "
                                                   "user to an unprivileged uid or fix --trial-uid-range"));
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the master asks to run this trial as uid ", start.run_as_uid(), " (--trial-uid-range) but "
                     "det-agent runs as uid ", geteuid(), ", not root: run det-agent as root"));
  }
  RunAs user;
  user.uid = start.run_as_uid();
  user.gid = start.run_as_gid();
  return std::optional<RunAs>(user);
}

// A StartAllocation without an allocation id or processes: InvalidArgument.
absl::Status CheckStartShape(const av1::StartAllocation& start) {
  if (start.allocation_id().empty()) return absl::InvalidArgumentError("StartAllocation without allocation_id");
  if (start.processes().empty()) return absl::InvalidArgumentError("StartAllocation without processes");
  return absl::OkStatus();
}

// Whether the allocation's config says debug: true (anything unreadable:
// no). Its ranks then get DET_DEBUG=1 and log at debug level from their
// first line.
bool ConfigDebug(const std::string& config_yaml) {
  ConfigSource source;
  source.name = "config";
  absl::StatusOr<nlohmann::json> config = ParseYamlToJson(config_yaml, &source);
  if (!config.ok() || !config->is_object()) return false;
  auto it = config->find("debug");
  return it != config->end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

std::vector<std::string> Agent::RunningAllocationIds() {
  absl::MutexLock lock(&mu_);
  return RunningIdsLocked();
}

std::vector<std::string> Agent::RunningIdsLocked() {
  std::vector<std::string> ids;
  for (const auto& [id, alloc] : allocations_) {
    bool live = alloc->starting;
    for (const auto& [rank, proc] : alloc->procs) live = live || !proc.done;
    if (live) ids.push_back(id);
  }
  return ids;
}

void Agent::StartAllocation(int64_t seq, const av1::StartAllocation& start) {
  if (absl::Status shape = CheckStartShape(start); !shape.ok()) {
    SendResult(seq, shape);
    return;
  }
  const std::string& id = start.allocation_id();
  auto alloc = std::make_shared<Allocation>();
  alloc->id = id;
  alloc->task_id = start.task_id();
  alloc->trial_id = start.trial_id();
  // The id and the hash name files on this node and come from the master,
  // input like any other: refuse either when it would lead elsewhere.
  absl::StatusOr<std::string> dir = AllocationDir(id);
  absl::Status paths =
      dir.ok() ? ValidateSha256(start.trial_so().sha256(), "trial_so.sha256") : dir.status();
  if (paths.ok()) paths = ValidateStartEnv(start);
  absl::StatusOr<std::optional<RunAs>> run_as = RunAsFor(start, options_.trial_user);
  if (paths.ok()) paths = run_as.status();
  if (!paths.ok()) {
    spdlog::error("refusing allocation {}: {}", id, paths.ToString());
    absl::MutexLock lock(&mu_);
    RefuseStartLocked(seq, start, *alloc, paths);
    return;
  }
  if (!Reserve(seq, start, alloc)) return;
  spdlog::info("starting allocation {} (trial {}, {} process(es))", id, start.trial_id(),
               start.processes_size());
  absl::StatusOr<std::string> so_path = FetchTrialSo(seq, start, *alloc);
  if (!so_path.ok()) return;
  alloc->run_as = *run_as;
  Env base_env = BaseEnvironment(start);
  absl::StatusOr<std::string> config_path = PrepareAllocationDir(start, *dir, alloc->run_as, &base_env);
  if (!config_path.ok()) {
    FailStart(seq, *alloc, config_path.status());
    return;
  }
  LaunchRanks(seq, start, *alloc, base_env, *so_path, *dir, *config_path);
}

absl::StatusOr<std::string> Agent::FetchTrialSo(int64_t seq, const av1::StartAllocation& start, Allocation& alloc) {
  auto so_path = cache_.Get(start.trial_so().sha256(),
                            [this](const std::string& sha, const ArtifactCache::ChunkSink& sink) {
                              return FetchArtifact(sha, sink);
                            });
  if (!so_path.ok()) {
    spdlog::error("allocation {}: artifact fetch failed: {}", alloc.id, so_path.status().ToString());
    FailStart(seq, alloc,
              absl::UnavailableError(absl::StrCat("artifact fetch failed for ",
                                                  start.trial_so_name().empty() ? "trial.so" : start.trial_so_name(),
                                                  ": ", so_path.status().ToString())));
  }
  return so_path;
}

void Agent::LaunchRanks(int64_t seq, const av1::StartAllocation& start, Allocation& alloc, const Env& base_env,
                        const std::string& so_path, const std::string& dir, const std::string& config_path) {
  absl::Status launched;
  for (const auto& spec : start.processes()) {
    absl::Status st = LaunchRank(start, spec, alloc, base_env, so_path, dir, config_path);
    if (launched.ok()) launched = st;
  }
  {
    absl::MutexLock lock(&mu_);
    alloc.starting = false;
  }
  SendResult(seq, launched.ok() ? absl::OkStatus() : absl::InternalError(launched.message()));
}

absl::StatusOr<std::string> Agent::AllocationDir(const std::string& allocation_id) const {
  DET_RETURN_IF_ERROR(ValidatePathComponent(allocation_id, "allocation_id"));
  return JoinUnder((fs::path(options_.work_dir) / "allocations").string(), allocation_id,
                   "allocation_id");
}

bool Agent::Reserve(int64_t seq, const av1::StartAllocation& start,
                    const std::shared_ptr<Allocation>& alloc) {
  const std::string& id = alloc->id;
  absl::MutexLock lock(&mu_);
  if (allocations_.count(id) > 0) {
    // A resent command for an allocation we already run.
    EnqueueResultLocked(seq, absl::StatusCode::kOk, "already running");
    return false;
  }
  std::set<int32_t> ours;
  std::set<int> ranks;
  for (const auto& d : options_.devices) ours.insert(d.id());
  for (const auto& spec : start.processes()) {
    if (!ranks.insert(spec.rank()).second) {
      EnqueueResultLocked(seq, absl::StatusCode::kInvalidArgument,
                          absl::StrCat("duplicate rank ", spec.rank()));
      return false;
    }
    for (int32_t dev : spec.device_ids()) {
      std::string problem;
      if (ours.count(dev) == 0) {
        problem = absl::StrCat("device ", dev, " does not exist on agent ", options_.agent_id);
      } else if (busy_devices_.count(dev) > 0) {
        problem = absl::StrCat("device ", dev, " is busy with allocation ", busy_devices_[dev]);
      }
      if (!problem.empty()) {
        RefuseStartLocked(seq, start, *alloc, absl::FailedPreconditionError(problem));
        return false;
      }
      alloc->device_ids.push_back(dev);
    }
  }
  for (int32_t dev : alloc->device_ids) busy_devices_[dev] = id;
  for (const auto& spec : start.processes()) {
    alloc->procs[spec.rank()].rank = spec.rank();
    alloc->procs[spec.rank()].device_ids.assign(spec.device_ids().begin(), spec.device_ids().end());
    EnqueueStateLocked(*alloc, spec.rank(), av1::PROCESS_STATE_PULLING, 0, nullptr, "");
  }
  allocations_[id] = alloc;
  return true;
}

void Agent::RefuseStartLocked(int64_t seq, const av1::StartAllocation& start,
                              const Allocation& alloc, const absl::Status& status) {
  // The master counts this allocation as placed: end every rank so it frees
  // the slots and reschedules instead of waiting forever.
  const std::string message(status.message());
  for (const auto& r : start.processes()) {
    EnqueueStateLocked(alloc, r.rank(), av1::PROCESS_STATE_TERMINATED, 0, nullptr, message);
  }
  EnqueueResultLocked(seq, status.code(), message);
}

void Agent::FailStart(int64_t seq, Allocation& alloc, const absl::Status& status) {
  const std::string message(status.message());
  absl::MutexLock lock(&mu_);
  AgentLogLocked(alloc, message);
  for (auto& [rank, proc] : alloc.procs) {
    if (proc.process == nullptr && !proc.done) {
      MarkDoneLocked(alloc, rank);
      EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr, message);
    }
  }
  alloc.starting = false;
  EnqueueResultLocked(seq, status.code(), message);
}

absl::Status Agent::LaunchRank(const av1::StartAllocation& start, const av1::ProcessSpec& spec,
                               Allocation& alloc, const Env& base_env, const std::string& so_path,
                               const std::string& dir, const std::string& config_path) {
  const int rank = spec.rank();
  {
    absl::MutexLock lock(&mu_);
    if (alloc.kill_requested) {
      MarkDoneLocked(alloc, rank);
      EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                         "killed before start");
      return absl::OkStatus();
    }
    EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_STARTING, 0, nullptr, "");
  }
  LaunchOptions lo;
  lo.argv = {options_.det_trial_path, "--managed", so_path};
  for (const auto& [k, v] : RankEnvironment(start, spec, base_env, so_path, config_path)) {
    lo.env.push_back(k + "=" + v);
  }
  lo.cwd = dir;
  lo.run_as = alloc.run_as;
  // The token goes over an inherited pipe (DET_ALLOCATION_TOKEN_FD), never
  // in the environment, which others may read (/proc/PID/environ).
  lo.secret = start.allocation_token();
  // Checkpoints the trial writes are 0770/0660 at most: in a setgid
  // storage root of the daemons' group the master can read and delete
  // them, other users' trials cannot (docs/operations/security.md).
  if (lo.run_as) lo.umask = 007;
  if (!cgroup_parent_.empty()) {
    lo.cgroup_dir = absl::StrCat(cgroup_parent_, "/det-alloc-", alloc.id, ".", rank);
  }
  const std::string id = alloc.id;
  lo.on_line = [this, id, rank](OutputStream s, std::string line) {
    OnLine(id, rank, s, std::move(line));
  };
  lo.on_exit = [this, id, rank](const ExitStatus& st) { OnExit(id, rank, st); };
  if (pool_ == nullptr) return AdoptProcess(alloc, rank, Process::Start(std::move(lo)));
  bool prestarted = false;
  absl::StatusOr<std::unique_ptr<Process>> process = pool_->Launch(std::move(lo), &prestarted);
  if (process.ok()) spdlog::info("allocation {} rank {}: {} process", id, rank, prestarted ? "prestarted" : "fresh");
  return AdoptProcess(alloc, rank, std::move(process));
}

absl::Status Agent::AdoptProcess(Allocation& alloc, int rank,
                                 absl::StatusOr<std::unique_ptr<Process>> process) {
  bool kill_now = false;
  absl::Duration grace;
  Process* raw = nullptr;
  {
    absl::MutexLock lock(&mu_);
    Proc& proc = alloc.procs[rank];
    if (!process.ok()) {
      MarkDoneLocked(alloc, rank);
      AgentLogLocked(alloc, absl::StrCat("rank ", rank, ": ", process.status().message()));
      EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                         std::string(process.status().message()));
      return process.status();
    }
    proc.process = std::move(*process);
    raw = proc.process.get();
    proc.pid = raw->pid();
    proc.running_reported = true;
    EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_RUNNING, proc.pid, nullptr, "");
    spdlog::info("allocation {} rank {}: pid {}", alloc.id, rank, proc.pid);
    if (proc.pending_exit) {
      MarkDoneLocked(alloc, rank);
      EnqueueStateLocked(alloc, rank, av1::PROCESS_STATE_TERMINATED, proc.pid, &*proc.pending_exit,
                         "");
    }
    kill_now = alloc.kill_requested && !proc.done;
    grace = alloc.kill_grace;
  }
  if (kill_now) raw->Kill(grace);
  return absl::OkStatus();
}

Agent::Env Agent::RankEnvironment(const av1::StartAllocation& start, const av1::ProcessSpec& spec,
                                  const Env& base_env, const std::string& so_path,
                                  const std::string& config_path) const {
  const int rank = spec.rank();
  const auto& rdv = start.rendezvous();
  const bool cuda = !options_.devices.empty() &&
                    options_.devices.front().type() == apiv1::DEVICE_TYPE_CUDA;
  const std::string master =
      start.master_address().empty() ? options_.master_address : start.master_address();
  Env env = base_env;
  for (const auto& [k, v] : spec.env()) env[k] = v;
  int node_rank = 0;
  for (const auto& r : rdv.ranks()) {
    if (r.rank() == rank) node_rank = r.node_rank();
  }
  env["DET_MASTER"] = master;
  env["DET_MASTER_ADDR"] = master;
  env["DET_ALLOCATION_ID"] = start.allocation_id();
  if (!start.allocation_token().empty()) env["DET_ALLOCATION_TOKEN_FD"] = std::to_string(kSecretFd);
  env["DET_TASK_ID"] = start.task_id();
  env["DET_TRIAL_ID"] = std::to_string(start.trial_id());
  env["DET_EXPERIMENT_ID"] = std::to_string(start.experiment_id());
  env["DET_RANK"] = std::to_string(rank);
  env["DET_LOCAL_RANK"] = std::to_string(spec.local_rank());
  env["DET_WORLD_SIZE"] =
      std::to_string(rdv.world_size() > 0 ? rdv.world_size() : start.processes_size());
  env["DET_LOCAL_SIZE"] = std::to_string(start.processes_size());
  env["DET_NODE_RANK"] = std::to_string(node_rank);
  env["DET_NUM_NODES"] = std::to_string(rdv.num_nodes() > 0 ? rdv.num_nodes() : 1);
  env["DET_CHIEF_ADDR"] = rdv.chief_address();
  env["DET_CHIEF_PORT"] = std::to_string(rdv.chief_port());
  env["DET_TRIAL_SO"] = so_path;
  // det-trial names the user's file in load errors, not the cache path.
  if (!start.trial_so_name().empty()) env["DET_TRIAL_SO_NAME"] = start.trial_so_name();
  env["DET_CONFIG"] = config_path;
  env["DET_AGENT_ID"] = options_.agent_id;
  if (ConfigDebug(start.config_yaml())) env["DET_DEBUG"] = "1";
  if (!start.checkpoint_storage_path().empty()) {
    env["DET_CHECKPOINT_STORAGE_PATH"] = start.checkpoint_storage_path();
  }
  env["CUDA_VISIBLE_DEVICES"] = cuda ? absl::StrJoin(spec.device_ids(), ",") : "";
  // The profiler's `system` rows report these GPUs only (NVML sees every GPU
  // of the node): their UUIDs in device order, "" for a CPU slot; unset
  // (det-trial then reads CUDA_VISIBLE_DEVICES) when a GPU's UUID is unknown.
  std::vector<std::string> uuids;
  const int gpus = cuda ? spec.device_ids_size() : 0;
  for (int i = 0; i < gpus; ++i) {
    for (const auto& d : options_.devices) {
      if (d.id() == spec.device_ids(i) && !d.uuid().empty()) uuids.push_back(d.uuid());
    }
  }
  if (uuids.size() == static_cast<size_t>(gpus)) {
    env["DET_GPU_UUIDS"] = absl::StrJoin(uuids, ",");
  } else {
    env.erase("DET_GPU_UUIDS");
  }
  return env;
}

void Agent::OnExit(const std::string& allocation_id, int rank, const ExitStatus& status) {
  if (status.exit_code) {
    spdlog::info("allocation {} rank {} exited with code {}", allocation_id, rank,
                 *status.exit_code);
  } else if (status.signal_number) {
    spdlog::info("allocation {} rank {} killed by signal {}", allocation_id, rank,
                 *status.signal_number);
  }
  absl::MutexLock lock(&mu_);
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  Proc& proc = it->second->procs[rank];
  if (!proc.running_reported) {
    proc.pending_exit = status;  // StartAllocation reports it after RUNNING
    return;
  }
  MarkDoneLocked(*it->second, rank);
  EnqueueStateLocked(*it->second, rank, av1::PROCESS_STATE_TERMINATED, proc.pid, &status, "");
}

void Agent::MarkDoneLocked(Allocation& alloc, int rank) {
  Proc& proc = alloc.procs[rank];
  proc.done = true;
  for (int32_t dev : proc.device_ids) {
    auto it = busy_devices_.find(dev);
    if (it != busy_devices_.end() && it->second == alloc.id) busy_devices_.erase(it);
  }
}

void Agent::KillLocal(const std::string& allocation_id, absl::Duration grace,
                      const std::string& reason) {
  std::shared_ptr<Allocation> alloc;  // keeps the processes alive below
  std::vector<Process*> targets;
  {
    absl::MutexLock lock(&mu_);
    auto it = allocations_.find(allocation_id);
    if (it == allocations_.end()) return;
    alloc = it->second;
    alloc->kill_requested = true;
    alloc->kill_grace = grace;
    for (auto& [rank, proc] : alloc->procs) {
      if (proc.process != nullptr && !proc.done) targets.push_back(proc.process.get());
    }
  }
  spdlog::info("killing allocation {} ({} process(es), grace {}): {}", allocation_id,
               targets.size(), absl::FormatDuration(grace), reason);
  for (Process* p : targets) p->Kill(grace);
}

void Agent::KillAllocation(int64_t seq, const av1::KillAllocation& kill) {
  {
    absl::MutexLock lock(&mu_);
    if (allocations_.count(kill.allocation_id()) == 0) {
      av1::AgentMessage m;
      m.mutable_command_result()->set_seq(seq);
      m.mutable_command_result()->set_code(static_cast<int>(absl::StatusCode::kNotFound));
      m.mutable_command_result()->set_message(
          absl::StrCat("unknown allocation ", kill.allocation_id()));
      EnqueueLocked(std::move(m));
      return;
    }
  }
  absl::Duration grace = kill.grace_period_seconds() > 0
                             ? absl::Seconds(kill.grace_period_seconds())
                             : absl::ZeroDuration();
  KillLocal(kill.allocation_id(), grace, kill.reason());
  SendResult(seq, absl::OkStatus());
}

void Agent::SignalAllocation(int64_t seq, const av1::SignalAllocation& sig) {
  if (sig.signal_number() <= 0 || sig.signal_number() >= NSIG) {
    SendResult(seq, absl::InvalidArgumentError(
                        absl::StrCat("bad signal number ", sig.signal_number())));
    return;
  }
  std::shared_ptr<Allocation> alloc;
  std::vector<Process*> targets;
  {
    absl::MutexLock lock(&mu_);
    auto it = allocations_.find(sig.allocation_id());
    if (it != allocations_.end()) {
      alloc = it->second;
      for (auto& [rank, proc] : alloc->procs) {
        if (sig.has_rank() && rank != sig.rank()) continue;
        if (proc.process != nullptr && !proc.done) targets.push_back(proc.process.get());
      }
    }
  }
  if (alloc == nullptr) {
    SendResult(seq, absl::NotFoundError(absl::StrCat("unknown allocation ", sig.allocation_id())));
    return;
  }
  if (sig.has_rank() && targets.empty()) {
    SendResult(seq, absl::NotFoundError(absl::StrCat("no running rank ", sig.rank(),
                                                     " in allocation ", sig.allocation_id())));
    return;
  }
  absl::Status st;
  for (Process* p : targets) {
    absl::Status s = p->Signal(sig.signal_number());
    if (st.ok()) st = s;
  }
  SendResult(seq, st);
}

void Agent::Reap() {
  std::vector<std::shared_ptr<Allocation>> finished;
  std::vector<Worker> done_workers;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      bool live = it->second->starting;
      for (const auto& [rank, proc] : it->second->procs) live = live || !proc.done;
      if (live) {
        ++it;
        continue;
      }
      for (int32_t dev : it->second->device_ids) {
        auto b = busy_devices_.find(dev);
        if (b != busy_devices_.end() && b->second == it->first) busy_devices_.erase(b);
      }
      finished.push_back(std::move(it->second));
      it = allocations_.erase(it);
    }
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (it->done->load()) {
        done_workers.push_back(std::move(*it));
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : done_workers) w.thread.join();
  // Destroying the allocations joins their (finished) reader threads.
  finished.clear();
}

}  // namespace det::agent
