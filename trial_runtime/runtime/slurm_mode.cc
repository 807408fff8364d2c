#include "trial_runtime/runtime/slurm_mode.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "trial_runtime/runtime/managed_mode.h"
#include "trial_runtime/runtime/master_client.h"

extern char** environ;

namespace det::runtime {
namespace {

namespace tv1 = ::det::trial::v1;
namespace apiv1 = ::det::api::v1;

constexpr int64_t kMaxJobFileBytes = 64 << 10;
constexpr size_t kMaxLineBytes = 64 << 10;
constexpr int kMaxLinesPerCall = 1000;

absl::StatusOr<int> IntVar(const std::map<std::string, std::string>& env, const char* name, int min, int max) {
  auto it = env.find(name);
  int v = 0;
  if (it == env.end() || !absl::SimpleAtoi(it->second, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is ", it == env.end() ? "not set" : "'" + it->second.substr(0, 64) + "'",
                                                   " (expected an integer in ", min, "..", max,
                                                   "; is this process started by srun in a Slurm job?)"));
  }
  return v;
}

// The tasks on node `node` from SLURM_TASKS_PER_NODE ("2", "2(x3),1").
absl::StatusOr<int> TasksOnNode(const std::string& spec, int node) {
  int index = 0;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    int tasks = 0, repeat = 1;
    absl::string_view count = part.substr(0, part.find('('));
    if (!absl::SimpleAtoi(count, &tasks)) break;
    if (auto x = part.find("(x"); x != absl::string_view::npos) {
      if (!absl::SimpleAtoi(part.substr(x + 2, part.size() - x - 3), &repeat)) break;
    }
    if (node < index + repeat) return tasks;
    index += repeat;
  }
  return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE '", spec.substr(0, 64), "' names no node ", node));
}

// Forwards this process's stdout and stderr, line by line, to the master
// and to where they went before (the job's output file).
class LogShipper {
 public:
  LogShipper(const SlurmJobFile& job, int rank) : job_(job), rank_(rank) {}
  ~LogShipper() { Stop(); }

  void Start() {
    for (int i = 0; i < 2; ++i) {
      int p[2];
      if (pipe2(p, O_CLOEXEC) != 0) return;
      orig_[i] = dup(1 + i);
      fflush(i == 0 ? stdout : stderr);
      dup2(p[1], 1 + i);
      close(p[1]);
      read_[i] = p[0];
    }
    stub_ = tv1::TrialService::NewStub(
        grpc::CreateCustomChannel(job_.master, MasterChannelCredentials(), grpc::ChannelArguments()));
    thread_ = std::thread([this] { Loop(); });
  }

  // Restores stdout/stderr and sends what is left.
  void Stop() {
    if (!thread_.joinable()) return;
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 2; ++i) {
      if (orig_[i] >= 0) dup2(orig_[i], 1 + i);  // the pipe's last writer goes: EOF
    }
    thread_.join();
  }

 private:
  void Loop() {
    pollfd fds[2] = {{read_[0], POLLIN, 0}, {read_[1], POLLIN, 0}};
    int open_fds = 2;
    auto last_send = std::chrono::steady_clock::now();
    char buf[65536];
    while (open_fds > 0) {
      poll(fds, 2, 500);
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
          continue;
        }
        if (orig_[i] >= 0) (void)!write(orig_[i], buf, static_cast<size_t>(n));
        Split(i, std::string_view(buf, static_cast<size_t>(n)));
      }
      if (batch_.size() >= 100 || std::chrono::steady_clock::now() - last_send > std::chrono::milliseconds(500)) {
        Send();
        last_send = std::chrono::steady_clock::now();
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (!partial_[i].empty()) Add(i, partial_[i]);
    }
    Send();
  }

  void Split(int stream, std::string_view data) {
    std::string& part = partial_[stream];
    for (char c : data) {
      if (c == '\n') {
        Add(stream, part);
        part.clear();
      } else if (part.size() >= kMaxLineBytes) {
        Add(stream, part);
        part.assign(1, c);
      } else {
        part += c;
      }
    }
  }

  void Add(int stream, const std::string& line) {
    if (batch_.size() >= 10 * kMaxLinesPerCall) return;  // the master is away: the output file has them
    apiv1::TaskLogLine log;
    log.set_allocation_id(job_.allocation_id);
    log.set_rank(rank_);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
    log.mutable_timestamp()->set_seconds(ms / 1000);
    log.mutable_timestamp()->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
    log.set_level(stream == 1 ? apiv1::LOG_LEVEL_ERROR : apiv1::LOG_LEVEL_INFO);
    log.set_stdtype(stream == 1 ? apiv1::STD_TYPE_STDERR : apiv1::STD_TYPE_STDOUT);
    log.set_source("runtime");
    log.set_message(Utf8Sanitized(line));
    batch_.push_back(std::move(log));
  }

  // One try per batch with a short deadline: a slow master costs lines in
  // its log store, never the trial's progress.
  void Send() {
    while (!batch_.empty()) {
      tv1::ReportTrialLogsRequest req;
      req.set_allocation_id(job_.allocation_id);
      const size_t n = std::min(batch_.size(), static_cast<size_t>(kMaxLinesPerCall));
      for (size_t i = 0; i < n; ++i) *req.add_logs() = std::move(batch_[i]);
      batch_.erase(batch_.begin(), batch_.begin() + static_cast<std::ptrdiff_t>(n));
      grpc::ClientContext ctx;
      ctx.AddMetadata("x-det-allocation-token", job_.token);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      tv1::ReportTrialLogsResponse resp;
      (void)stub_->ReportTrialLogs(&ctx, req, &resp);
    }
  }

  const SlurmJobFile job_;
  const int rank_;
  int orig_[2] = {-1, -1};
  int read_[2] = {-1, -1};
  std::string partial_[2];
  std::vector<apiv1::TaskLogLine> batch_;
  std::unique_ptr<tv1::TrialService::Stub> stub_;
  std::thread thread_;
};

}  // namespace

absl::StatusOr<SlurmJobFile> ReadSlurmJobFile(const std::string& path) {
  DET_ASSIGN_OR_RETURN(std::string text,
                       ReadBoundedFile(path, kMaxJobFileBytes, absl::StrCat("--slurm-job-file ", path)));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("--slurm-job-file ", path, ": not a JSON object"));
  SlurmJobFile job;
  for (auto [key, out] : {std::pair{"master", &job.master}, std::pair{"allocation_id", &job.allocation_id},
                          std::pair{"token", &job.token}}) {
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--slurm-job-file ", path, ": field '", key, "' must be a non-empty string"));
    }
    *out = j[key].get<std::string>();
  }
  if (j.contains("chief_port")) {
    if (!j["chief_port"].is_number_integer() || j["chief_port"].get<int64_t>() < 0 ||
        j["chief_port"].get<int64_t>() > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--slurm-job-file ", path, ": field 'chief_port' must be a port"));
    }
    job.chief_port = j["chief_port"].get<int>();
  }
  job.debug = j.value("debug", false) == true;
  return job;
}

absl::StatusOr<std::map<std::string, std::string>> RankEnvironmentFromSlurm(
    const std::map<std::string, std::string>& slurm, const SlurmJobFile& job) {
  constexpr int kMax = 1 << 20;
  std::map<std::string, std::string> env;
  auto ntasks = IntVar(slurm, "SLURM_NTASKS", 1, kMax);
  if (!ntasks.ok()) return ntasks.status();
  auto rank = IntVar(slurm, "SLURM_PROCID", 0, *ntasks - 1);
  if (!rank.ok()) return rank.status();
  auto local = IntVar(slurm, "SLURM_LOCALID", 0, kMax);
  if (!local.ok()) return local.status();
  int node = 0, nodes = 1, local_size = *ntasks;
  if (slurm.count("SLURM_NODEID")) {
    auto v = IntVar(slurm, "SLURM_NODEID", 0, kMax);
    if (!v.ok()) return v.status();
    node = *v;
  }
  if (slurm.count("SLURM_JOB_NUM_NODES")) {
    auto v = IntVar(slurm, "SLURM_JOB_NUM_NODES", 1, kMax);
    if (!v.ok()) return v.status();
    nodes = *v;
  }
  if (auto it = slurm.find("SLURM_TASKS_PER_NODE"); it != slurm.end()) {
    auto v = TasksOnNode(it->second, node);
    if (!v.ok()) return v.status();
    local_size = *v;
  }
  env["DET_MASTER"] = job.master;
  env["DET_MASTER_ADDR"] = job.master;
  env["DET_ALLOCATION_ID"] = job.allocation_id;
  env["DET_RANK"] = std::to_string(*rank);
  env["DET_LOCAL_RANK"] = std::to_string(*local);
  env["DET_WORLD_SIZE"] = std::to_string(*ntasks);
  env["DET_LOCAL_SIZE"] = std::to_string(local_size);
  env["DET_NODE_RANK"] = std::to_string(node);
  env["DET_NUM_NODES"] = std::to_string(nodes);
  env["DET_CHIEF_PORT"] = std::to_string(job.chief_port);
  auto chief = slurm.find("DET_CHIEF_ADDR");
  if (*ntasks > 1 && (chief == slurm.end() || chief->second.empty())) {
    return absl::InvalidArgumentError("DET_CHIEF_ADDR is not set (the batch script sets it to the job's first node)");
  }
  if (chief != slurm.end()) env["DET_CHIEF_ADDR"] = chief->second;
  if (job.debug) env["DET_DEBUG"] = "1";
  return env;
}

int RunSlurmManaged(const std::string& job_file, const std::string& trial_path, int threads) {
  absl::StatusOr<SlurmJobFile> job = ReadSlurmJobFile(job_file);
  if (!job.ok()) {
    std::fprintf(stderr, "det-trial: error: %s\n", std::string(job.status().message()).c_str());
    return kExitConfigError;
  }
  std::map<std::string, std::string> slurm;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) slurm[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  absl::StatusOr<std::map<std::string, std::string>> env = RankEnvironmentFromSlurm(slurm, *job);
  if (!env.ok()) {
    std::fprintf(stderr, "det-trial: error: %s\n", std::string(env.status().message()).c_str());
    return kExitConfigError;
  }
  for (const auto& [k, v] : *env) setenv(k.c_str(), v.c_str(), 1);
  // The token stays out of the environment (other users' ps/proc cannot
  // read it; the job file is 0600).
  unsetenv("DET_ALLOCATION_TOKEN");
  LogShipper shipper(*job, std::atoi(env->at("DET_RANK").c_str()));
  shipper.Start();
  const int rc = RunManagedWithToken(trial_path, threads, job->token);
  shipper.Stop();
  return rc;
}

}  // namespace det::runtime
