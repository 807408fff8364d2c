#include "master/core/slurm_jobs.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/bounded_file.h"
#include "common/config_reader.h"
#include "common/shell_quote.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

constexpr char kJobPrefix[] = "det-";

bool SafeChars(std::string_view s, std::string_view extra) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
                    extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

absl::Status ParseSlurmSection(const ConfigSource& source, const ConfigMapReader& r, SlurmConfig* out) {
  if (const nlohmann::json* pools = r.Find("partition_pools")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader pr, ConfigMapReader::Create(source, *pools, r.PathOf("partition_pools")));
    if (pools->size() > static_cast<size_t>(kMaxSlurmPartitions)) {
      return r.Error("partition_pools", absl::StrCat("field '", r.PathOf("partition_pools"), "' maps ", pools->size(),
                                                     " pools; the limit is ", kMaxSlurmPartitions));
    }
    for (const auto& [pool, partition] : pools->items()) {
      std::string name;
      DET_RETURN_IF_ERROR(pr.GetString(pool, &name));
      if (!SafeChars(pool, "") || !SafeChars(name, "") || name.size() > 128 || pool.size() > 128) {
        return pr.Error(pool, absl::StrCat("field '", pr.PathOf(pool),
                                           "': pool and partition names are 1..128 characters of [A-Za-z0-9_.-]"));
      }
      out->partition_pools[pool] = name;
    }
  }
  DET_RETURN_IF_ERROR(r.GetStringList("gpu_partitions", &out->gpu_partitions));
  if (out->gpu_partitions.size() > static_cast<size_t>(kMaxSlurmPartitions)) {
    return r.Error("gpu_partitions", "field 'resource_manager.gpu_partitions' lists too many partitions");
  }
  int64_t v = out->gpus_per_node;
  DET_RETURN_IF_ERROR(r.GetInt("gpus_per_node", &v, 1, 1024));
  out->gpus_per_node = static_cast<int>(v);
  v = out->time_limit_minutes;
  DET_RETURN_IF_ERROR(r.GetInt("time_limit_minutes", &v, 1, 525600));
  out->time_limit_minutes = static_cast<int>(v);
  v = out->poll_interval_ms;
  DET_RETURN_IF_ERROR(r.GetInt("poll_interval_ms", &v, 100, 600000));
  out->poll_interval_ms = static_cast<int>(v);
  for (auto [key, target] : {std::pair{"job_storage_root", &out->job_storage_root},
                             std::pair{"det_trial", &out->det_trial}, std::pair{"master_address", &out->master_address},
                             std::pair{"slurm_bin_dir", &out->slurm_bin_dir}}) {
    DET_RETURN_IF_ERROR(r.GetString(key, target));
    if (target->size() > 4096 || target->find('\n') != std::string::npos) {
      return r.Error(key, absl::StrCat("field '", r.PathOf(key), "' is longer than 4096 bytes or spans lines"));
    }
  }
  for (auto [key, target] : {std::pair{"job_storage_root", &out->job_storage_root},
                             std::pair{"det_trial", &out->det_trial}}) {
    if (!target->empty() && (*target)[0] != '/') {
      return r.Error(key, absl::StrCat("field '", r.PathOf(key), "' must be an absolute path"));
    }
  }
  if (const nlohmann::json* ports = r.Find("rendezvous_ports")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader pr, ConfigMapReader::Create(source, *ports, r.PathOf("rendezvous_ports")));
    DET_RETURN_IF_ERROR(pr.CheckKeys({"first", "last"}));
    int64_t first = out->rendezvous_first, last = out->rendezvous_last;
    DET_RETURN_IF_ERROR(pr.GetInt("first", &first, 1, 65535));
    DET_RETURN_IF_ERROR(pr.GetInt("last", &last, 1, 65535));
    if (first > last) return pr.Error("first", "field 'resource_manager.rendezvous_ports': first > last");
    out->rendezvous_first = static_cast<int>(first);
    out->rendezvous_last = static_cast<int>(last);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResourceManagerConfig> ParseResourceManagerConfig(std::string_view yaml_text,
                                                                 std::string_view source_name) {
  ConfigSource source;
  source.name = std::string(source_name);
  YamlLimits limits;
  limits.max_bytes = kMaxResourceManagerFileBytes;
  DET_ASSIGN_OR_RETURN(nlohmann::json doc, ParseYamlToJson(yaml_text, &source, limits));
  ResourceManagerConfig out;
  if (doc.is_null()) return out;
  DET_ASSIGN_OR_RETURN(ConfigMapReader top, ConfigMapReader::Create(source, doc, ""));
  const nlohmann::json* rm = top.Find("resource_manager");
  if (rm == nullptr) return out;
  DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *rm, "resource_manager"));
  DET_RETURN_IF_ERROR(r.CheckKeys({"type", "partition_pools", "gpu_partitions", "gpus_per_node", "job_storage_root",
                                   "det_trial", "master_address", "time_limit_minutes", "rendezvous_ports",
                                   "slurm_bin_dir", "poll_interval_ms"},
                                  // Determined's launcher and agent-RM keys: not used here.
                                  {"master_host", "master_port", "host", "port", "protocol", "user_name",
                                   "auth_file", "path", "gres_supported", "default_aux_resource_pool",
                                   "default_compute_resource_pool", "scheduler", "no_default_resource_pools"}));
  std::string type = "agent";
  DET_RETURN_IF_ERROR(r.GetEnum("type", {"agent", "slurm", "pbs", "kubernetes"}, &type));
  if (type == "pbs" || type == "kubernetes") {
    return r.Error("type", absl::StrCat("field 'resource_manager.type': '", type,
                                        "' is not supported by det-cpp (agent or slurm)"));
  }
  if (type == "agent") {
    DET_RETURN_IF_ERROR(r.CheckKeys({"type"}));
    return out;
  }
  out.type = ResourceManagerType::kSlurm;
  DET_RETURN_IF_ERROR(ParseSlurmSection(source, r, &out.slurm));
  return out;
}

absl::StatusOr<ResourceManagerConfig> LoadResourceManagerFile(const std::string& path) {
  DET_ASSIGN_OR_RETURN(std::string text, ReadBoundedFile(path, kMaxResourceManagerFileBytes,
                                                        absl::StrCat("master config file '", path, "'")));
  return ParseResourceManagerConfig(text, path);
}

std::string SlurmJobName(const std::string& allocation_id) { return absl::StrCat(kJobPrefix, allocation_id); }

std::string AllocationOfJobName(const std::string& job_name) {
  if (!absl::StartsWith(job_name, kJobPrefix)) return "";
  return job_name.substr(sizeof(kJobPrefix) - 1);
}

absl::StatusOr<std::string> SlurmBatchScript(const SlurmJobSpec& spec) {
  if (!SafeChars(spec.allocation_id, "")) {
    return absl::InvalidArgumentError(absl::StrCat("allocation id '", spec.allocation_id.substr(0, 64),
                                                   "' is not [A-Za-z0-9._-]"));
  }
  if (!SafeChars(spec.job_dir, "/") || spec.job_dir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("job directory '", spec.job_dir.substr(0, 256),
                                                   "' must be an absolute path of [A-Za-z0-9._/-]"));
  }
  if (!spec.partition.empty() && !SafeChars(spec.partition, "")) {
    return absl::InvalidArgumentError(absl::StrCat("partition '", spec.partition.substr(0, 128), "' is not [A-Za-z0-9._-]"));
  }
  if (spec.det_trial.empty() || spec.det_trial.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError("det_trial: no path of det-trial");
  }
  const int ntasks = std::max(1, spec.ntasks);
  std::string s = "#!/bin/sh\n";
  absl::StrAppend(&s, "# det-cpp allocation ", spec.allocation_id, " (generated by det-master)\n");
  absl::StrAppend(&s, "#SBATCH --job-name=", SlurmJobName(spec.allocation_id), "\n");
  absl::StrAppend(&s, "#SBATCH --ntasks=", ntasks, "\n");
  if (!spec.partition.empty()) absl::StrAppend(&s, "#SBATCH --partition=", spec.partition, "\n");
  absl::StrAppend(&s, "#SBATCH --time=", spec.time_limit_minutes, "\n");
  if (spec.gpus) {
    if (ntasks <= spec.gpus_per_node) {
      absl::StrAppend(&s, "#SBATCH --nodes=1\n#SBATCH --gres=gpu:", ntasks, "\n");
    } else if (ntasks % spec.gpus_per_node == 0) {
      absl::StrAppend(&s, "#SBATCH --nodes=", ntasks / spec.gpus_per_node, "\n#SBATCH --ntasks-per-node=",
                      spec.gpus_per_node, "\n#SBATCH --gres=gpu:", spec.gpus_per_node, "\n");
    } else {
      return absl::InvalidArgumentError(absl::StrCat("resources.slots_per_trial ", ntasks, " is more than one node's ",
                                                     spec.gpus_per_node, " GPUs and not a multiple of it"));
    }
  }
  absl::StrAppend(&s, "#SBATCH --output=", spec.job_dir, "/slurm-%j.out\n");
  absl::StrAppend(&s, "#SBATCH --chdir=", spec.job_dir, "\n");
  // Never requeued by Slurm: a job that fails or loses its node ends, and the
  // master resumes the trial from its checkpoint in a new allocation.
  absl::StrAppend(&s, "#SBATCH --no-requeue\n");
  absl::StrAppend(&s, "DET_JOB_DIR=", ShellQuote(spec.job_dir), "\nexport DET_JOB_DIR\n");
  // The chief (rank 0) runs on the job's first node.
  absl::StrAppend(&s, "DET_CHIEF_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n",
                  "export DET_CHIEF_ADDR\n");
  absl::StrAppend(&s, "rm -f \"$DET_JOB_DIR\"/exit.*\n");
  // Each rank's shell records its det-trial's exit status (128+signal when
  // killed); a rank that fails ends the others (--kill-on-bad-exit).
  absl::StrAppend(&s, "srun --kill-on-bad-exit=1 --ntasks=", ntasks,
                  " /bin/sh -c '\"$@\"; rc=$?; echo $rc > \"$DET_JOB_DIR/exit.$SLURM_PROCID\"; exit $rc' det-rank ",
                  ShellQuote(spec.det_trial), " --managed --slurm-job-file \"$DET_JOB_DIR/job.json\" ",
                  "\"$DET_JOB_DIR/trial.so\"\n");
  return s;
}

absl::StatusOr<std::string> ParseSbatchOutput(const std::string& out) {
  absl::string_view line = absl::StripAsciiWhitespace(out);
  if (auto nl = line.rfind('\n'); nl != absl::string_view::npos) line = line.substr(nl + 1);
  std::string id(line.substr(0, line.find(';')));
  if (id.empty() || id.size() > 20 || !SafeChars(id, "") ||
      !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::InternalError(absl::StrCat("sbatch printed no job id: '", out.substr(0, 200), "'"));
  }
  return id;
}

std::map<std::string, SqueueJob> ParseSqueue(const std::string& out) {
  std::map<std::string, SqueueJob> jobs;
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (++lines > 100000) break;
    std::vector<absl::string_view> f = absl::StrSplit(absl::StripAsciiWhitespace(line), '|');
    if (f.size() < 3 || f[0].empty() || f[1].empty()) continue;
    SqueueJob j;
    j.job_id = std::string(f[0]);
    j.name = std::string(f[1]);
    j.state = std::string(f[2]);
    if (f.size() > 3) j.reason = std::string(f[3]);
    // A requeued job appears again under the same name: the newest id wins.
    auto it = jobs.find(j.name);
    if (it == jobs.end() || it->second.job_id.size() < j.job_id.size() ||
        (it->second.job_id.size() == j.job_id.size() && it->second.job_id < j.job_id)) {
      jobs[j.name] = std::move(j);
    }
  }
  return jobs;
}

SlurmPhase PhaseOfState(const std::string& state) {
  static const char* const kPending[] = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                                         "RESV_DEL_HOLD", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"};
  for (const char* p : kPending) {
    if (state == p) return SlurmPhase::kPending;
  }
  // COMPLETING: ranks are still being cleaned up; what they left is final
  // only once the job leaves that state.
  if (state == "RUNNING" || state == "COMPLETING" || state == "STOPPED") return SlurmPhase::kRunning;
  return SlurmPhase::kEnded;
}

std::vector<RankEnd> DecideRankEnds(const std::optional<SqueueJob>& listed,
                                    const std::vector<std::optional<int>>& exit_codes) {
  std::vector<RankEnd> ends;
  const std::string state = listed ? listed->state : "";
  for (size_t rank = 0; rank < exit_codes.size(); ++rank) {
    RankEnd e;
    if (exit_codes[rank]) {
      e.exit_code = *exit_codes[rank];
      e.why = e.exit_code == 0 ? "" : absl::StrCat("rank ", rank, " exited with code ", e.exit_code);
      if (e.exit_code > 128) e.why = absl::StrCat("rank ", rank, " killed by signal ", e.exit_code - 128);
    } else if (!listed) {
      // Gone from squeue without a word from the rank: the master was away
      // longer than Slurm remembers jobs, or the job never ran.
      e.exit_code = 137;
      e.lost = true;
      e.why = absl::StrCat("rank ", rank, ": the Slurm job ended unseen (not in squeue, no exit status)");
    } else if (state == "CANCELLED") {
      e.exit_code = 143;
      e.why = absl::StrCat("rank ", rank, ": Slurm job ", listed->job_id, " CANCELLED");
    } else if (state == "NODE_FAIL" || state == "BOOT_FAIL" || state == "PREEMPTED") {
      e.exit_code = 137;
      e.lost = true;
      e.why = absl::StrCat("rank ", rank, ": Slurm job ", listed->job_id, " ", state);
    } else {
      e.exit_code = 1;
      e.why = absl::StrCat("rank ", rank, ": Slurm job ", listed->job_id, " ", state.empty() ? "ended" : state,
                           " without an exit status (see slurm-", listed->job_id, ".out in its job directory)");
    }
    ends.push_back(std::move(e));
  }
  return ends;
}

}  // namespace det::master
