#include "agent/agent.h"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace det::agent {
namespace {

namespace fs = std::filesystem;
namespace av1 = det::agent::v1;
namespace apiv1 = det::api::v1;

constexpr size_t kMaxBufferedLogLines = 100000;

void SetNow(google::protobuf::Timestamp* ts) {
  absl::Time now = absl::Now();
  int64_t nanos = absl::ToUnixNanos(now);
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

// Allocation ids become directory names: keep [A-Za-z0-9_.-] only.
std::string SafeName(const std::string& id) {
  std::string out;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

bool IsFatalRegisterError(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNIMPLEMENTED:
      return true;
    default:
      return false;
  }
}

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      cache_((fs::path(options_.work_dir) / "cache").string()) {}

Agent::~Agent() {
  Shutdown();
  std::vector<Worker> workers;
  {
    absl::MutexLock lock(&mu_);
    workers.swap(workers_);
  }
  for (auto& w : workers) {
    if (w.thread.joinable()) w.thread.join();
  }
  std::map<std::string, std::shared_ptr<Allocation>> allocations;
  {
    absl::MutexLock lock(&mu_);
    allocations.swap(allocations_);
  }
  // Process destructors SIGKILL their groups and join their readers.
  allocations.clear();
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  for (grpc::ClientContext* ctx : contexts_) ctx->TryCancel();
}

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

void Agent::AddClusterSecret(grpc::ClientContext* ctx) const {
  // Every AgentService call carries the secret (the master checks it when it
  // has one configured).
  if (!options_.cluster_secret.empty()) ctx->AddMetadata("x-det-cluster-secret", options_.cluster_secret);
}

void Agent::SleepUnlessShutdown(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&shutdown_), d);
}

absl::Status Agent::Run() {
  auto creds = options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials();
  // Reconnect within a second of a restarted master coming back (gRPC's own
  // reconnect backoff would grow to two minutes); Run() adds its backoff.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  stub_ = av1::AgentService::NewStub(grpc::CreateCustomChannel(options_.master_address, creds, args));

  absl::Duration backoff = options_.backoff_initial;
  bool need_register = true;
  bool registered_once = false;
  bool rejected_after_register = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) break;
    }
    Reap();
    if (need_register) {
      absl::Status st = Register(registered_once);
      if (!st.ok()) {
        if (IsFatalRegisterError(static_cast<grpc::StatusCode>(st.code()))) {
          spdlog::error("master rejected registration of agent '{}': {}", options_.agent_id,
                        st.ToString());
          return st;
        }
        spdlog::warn("cannot register with master {}: {}; retrying in {}",
                     options_.master_address, st.ToString(), absl::FormatDuration(backoff));
        SleepUnlessShutdown(backoff);
        backoff = std::min(backoff * 2, options_.backoff_max);
        continue;
      }
      need_register = false;
      registered_once = true;
    }
    absl::Time started = absl::Now();
    bool received = false;
    grpc::Status st = RunSession(&received);
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) break;
    }
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      need_register = true;
      // The master no longer knows this session (it restarted): it is up, so
      // register again at once (the running trial processes wait to be
      // reattached); a second refusal in a row backs off as usual.
      if (!rejected_after_register) {
        rejected_after_register = true;
        spdlog::warn("master does not know this agent's session ({}); registering again",
                     st.error_message());
        continue;
      }
    } else {
      rejected_after_register = false;
    }
    if (received || absl::Now() - started >= options_.backoff_max) {
      backoff = options_.backoff_initial;
      if (received) rejected_after_register = false;
    }
    spdlog::warn("stream to master lost ({}: {}); reconnecting in {}",
                 static_cast<int>(st.error_code()), st.error_message(),
                 absl::FormatDuration(backoff));
    SleepUnlessShutdown(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
  spdlog::info("agent '{}' shutting down", options_.agent_id);
  return absl::OkStatus();
}

absl::Status Agent::Register(bool re_register) {
  av1::RegisterAgentRequest req;
  req.set_agent_id(options_.agent_id);
  req.set_hostname(options_.hostname);
  if (options_.addresses.empty()) {
    req.add_addresses(options_.hostname);
  } else {
    for (const auto& a : options_.addresses) req.add_addresses(a);
  }
  req.set_resource_pool(options_.resource_pool);
  for (const auto& d : options_.devices) *req.add_devices() = d;
  req.set_version(options_.version);
  req.set_cluster_secret(options_.cluster_secret);
  req.mutable_rendezvous_ports()->set_first(options_.rendezvous_first_port);
  req.mutable_rendezvous_ports()->set_last(options_.rendezvous_last_port);
  std::string previous_token;
  {
    absl::MutexLock lock(&mu_);
    previous_token = session_token_;
    if (re_register) {
      req.set_previous_session_token(session_token_);
      for (const auto& id : RunningIdsLocked()) req.add_running_allocation_ids(id);
    }
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  AddClusterSecret(&ctx);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::CancelledError("shutting down");
    contexts_.insert(&ctx);
  }
  av1::RegisterAgentResponse resp;
  grpc::Status st = stub_->RegisterAgent(&ctx, req, &resp);
  {
    absl::MutexLock lock(&mu_);
    contexts_.erase(&ctx);
  }
  if (!st.ok()) return FromGrpcStatus(st);

  std::vector<std::string> to_kill(resp.kill_allocation_ids().begin(),
                                   resp.kill_allocation_ids().end());
  {
    absl::MutexLock lock(&mu_);
    session_token_ = resp.session_token();
    heartbeat_interval_ms_ = resp.heartbeat_interval_ms() > 0 ? resp.heartbeat_interval_ms() : 5000;
    // Results of the old session's commands mean nothing to the new one.
    if (previous_token != session_token_) {
      std::deque<av1::AgentMessage> kept;
      for (auto& m : outbox_) {
        if (!m.has_command_result()) kept.push_back(std::move(m));
      }
      outbox_.swap(kept);
    }
  }
  spdlog::info("registered agent '{}' with master {} (master_id '{}', {} slots, heartbeat {} ms{})",
               options_.agent_id, options_.master_address, resp.master_id(),
               options_.devices.size(), resp.heartbeat_interval_ms(),
               resp.enabled() ? "" : ", disabled");
  for (const auto& id : to_kill) {
    KillLocal(id, absl::ZeroDuration(), "unknown to the master after re-registration");
  }
  return absl::OkStatus();
}

grpc::Status Agent::RunSession(bool* received) {
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
    ctx.AddMetadata("authorization", "Bearer " + session_token_);
    AddClusterSecret(&ctx);
    contexts_.insert(&ctx);
    session_done_ = false;
  }
  auto stream = stub_->Connect(&ctx);
  std::thread writer([this, s = stream.get()] { WriterLoop(s); });
  av1::MasterMessage msg;
  while (stream->Read(&msg)) {
    *received = true;
    HandleCommand(msg);
  }
  {
    absl::MutexLock lock(&mu_);
    session_done_ = true;
  }
  writer.join();
  grpc::Status st = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    contexts_.erase(&ctx);
  }
  return st;
}

void Agent::WriterLoop(
    grpc::ClientReaderWriter<av1::AgentMessage, av1::MasterMessage>* stream) {
  absl::Time next_heartbeat = absl::Now();  // announce ourselves at once
  while (true) {
    av1::AgentMessage msg;
    {
      absl::MutexLock lock(&mu_);
      absl::Time deadline = next_heartbeat;
      if (!log_buffer_.empty()) {
        deadline = std::min(deadline, log_buffer_since_ + options_.log_batch_delay);
      }
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return session_done_ || shutdown_ || !outbox_.empty() ||
               log_buffer_.size() >= options_.log_batch_lines;
      };
      mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
      if (session_done_ || shutdown_) return;
      absl::Time now = absl::Now();
      if (!log_buffer_.empty() && (log_buffer_.size() >= options_.log_batch_lines ||
                                   now >= log_buffer_since_ + options_.log_batch_delay)) {
        FlushLogsLocked();
      }
      if (now >= next_heartbeat) {
        auto* hb = msg.mutable_heartbeat();
        SetNow(hb->mutable_time());
        for (auto& id : RunningIdsLocked()) hb->add_running_allocation_ids(id);
        next_heartbeat = now + absl::Milliseconds(heartbeat_interval_ms_);
      } else if (!outbox_.empty()) {
        msg = std::move(outbox_.front());
        outbox_.pop_front();
      } else {
        continue;
      }
    }
    if (!stream->Write(msg)) {
      if (!msg.has_heartbeat()) {
        absl::MutexLock lock(&mu_);
        outbox_.push_front(std::move(msg));  // resend on the next stream
      }
      return;
    }
    if (msg.has_process_state() &&
        msg.process_state().state() == av1::PROCESS_STATE_TERMINATED) {
      Reap();
    }
  }
}

void Agent::HandleCommand(const av1::MasterMessage& msg) {
  const int64_t seq = msg.seq();
  switch (msg.command_case()) {
    case av1::MasterMessage::kStartAllocation: {
      auto done = std::make_shared<std::atomic<bool>>(false);
      absl::MutexLock lock(&mu_);
      workers_.push_back(Worker{
          std::thread([this, seq, start = msg.start_allocation(), done] {
            StartAllocation(seq, start);
            done->store(true);
          }),
          done});
      return;
    }
    case av1::MasterMessage::kKillAllocation:
      KillAllocation(seq, msg.kill_allocation());
      return;
    case av1::MasterMessage::kSignalAllocation:
      SignalAllocation(seq, msg.signal_allocation());
      return;
    default:
      SendResult(seq, absl::UnimplementedError("unknown command"));
  }
}

void Agent::SendResult(int64_t seq, absl::Status status) {
  av1::AgentMessage msg;
  auto* r = msg.mutable_command_result();
  r->set_seq(seq);
  r->set_code(static_cast<int32_t>(status.code()));
  r->set_message(std::string(status.message()));
  absl::MutexLock lock(&mu_);
  EnqueueLocked(std::move(msg));
}

void Agent::EnqueueLocked(av1::AgentMessage msg) {
  // Lines emitted before a state change go out before it.
  FlushLogsLocked();
  outbox_.push_back(std::move(msg));
}

void Agent::FlushLogsLocked() {
  while (!log_buffer_.empty()) {
    av1::AgentMessage msg;
    auto* batch = msg.mutable_logs();
    while (!log_buffer_.empty() &&
           static_cast<size_t>(batch->logs_size()) < options_.log_batch_lines) {
      *batch->add_logs() = std::move(log_buffer_.front());
      log_buffer_.pop_front();
    }
    outbox_.push_back(std::move(msg));
  }
}

void Agent::EnqueueStateLocked(const Allocation& alloc, int rank, av1::ProcessState state,
                               int64_t pid, const ExitStatus* exit, const std::string& message) {
  av1::AgentMessage msg;
  auto* ps = msg.mutable_process_state();
  ps->set_allocation_id(alloc.id);
  ps->set_rank(rank);
  ps->set_state(state);
  ps->set_pid(pid);
  ps->set_message(message);
  if (exit != nullptr) {
    if (exit->exit_code) ps->set_exit_code(*exit->exit_code);
    if (exit->signal_number) ps->set_signal_number(*exit->signal_number);
  }
  SetNow(ps->mutable_time());
  EnqueueLocked(std::move(msg));
}

void Agent::AgentLogLocked(const Allocation& alloc, const std::string& message) {
  apiv1::TaskLog log;
  log.set_trial_id(alloc.trial_id);
  log.set_task_id(alloc.task_id);
  log.set_allocation_id(alloc.id);
  log.set_agent_id(options_.agent_id);
  SetNow(log.mutable_timestamp());
  log.set_level(apiv1::LOG_LEVEL_ERROR);
  log.set_stdtype(apiv1::STD_TYPE_UNSPECIFIED);
  log.set_source("agent");
  log.set_message(message);
  if (log_buffer_.empty()) log_buffer_since_ = absl::Now();
  log_buffer_.push_back(std::move(log));
}

absl::Status Agent::FetchArtifact(const std::string& sha256,
                                  const ArtifactCache::ChunkSink& sink) {
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::CancelledError("shutting down");
    ctx.AddMetadata("authorization", "Bearer " + session_token_);
    AddClusterSecret(&ctx);
    contexts_.insert(&ctx);
  }
  av1::FetchArtifactRequest req;
  req.set_sha256(sha256);
  req.set_offset(0);
  auto reader = stub_->FetchArtifact(&ctx, req);
  av1::FetchArtifactResponse resp;
  absl::Status sink_status;
  while (reader->Read(&resp)) {
    sink_status = sink(resp.offset(), resp.data());
    if (!sink_status.ok()) {
      ctx.TryCancel();
      while (reader->Read(&resp)) {
      }
      break;
    }
  }
  grpc::Status st = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    contexts_.erase(&ctx);
  }
  if (!sink_status.ok()) return sink_status;
  return FromGrpcStatus(st, absl::StrCat("FetchArtifact(", sha256, ")"));
}

void Agent::StartAllocation(int64_t seq, const av1::StartAllocation& start) {
  const std::string& id = start.allocation_id();
  if (id.empty()) {
    SendResult(seq, absl::InvalidArgumentError("StartAllocation without allocation_id"));
    return;
  }
  if (start.processes().empty()) {
    SendResult(seq, absl::InvalidArgumentError("StartAllocation without processes"));
    return;
  }
  auto alloc = std::make_shared<Allocation>();
  alloc->id = id;
  alloc->task_id = start.task_id();
  alloc->trial_id = start.trial_id();
  {
    absl::MutexLock lock(&mu_);
    if (allocations_.count(id) > 0) {
      // A resent command for an allocation we already run.
      EnqueueLocked([&] {
        av1::AgentMessage m;
        m.mutable_command_result()->set_seq(seq);
        m.mutable_command_result()->set_message("already running");
        return m;
      }());
      return;
    }
    std::set<int32_t> ours;
    std::set<int> ranks;
    for (const auto& d : options_.devices) ours.insert(d.id());
    for (const auto& spec : start.processes()) {
      if (!ranks.insert(spec.rank()).second) {
        EnqueueLocked([&] {
          av1::AgentMessage m;
          m.mutable_command_result()->set_seq(seq);
          m.mutable_command_result()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
          m.mutable_command_result()->set_message(absl::StrCat("duplicate rank ", spec.rank()));
          return m;
        }());
        return;
      }
      for (int32_t dev : spec.device_ids()) {
        std::string problem;
        if (ours.count(dev) == 0) {
          problem = absl::StrCat("device ", dev, " does not exist on agent ", options_.agent_id);
        } else if (busy_devices_.count(dev) > 0) {
          problem = absl::StrCat("device ", dev, " is busy with allocation ", busy_devices_[dev]);
        }
        if (!problem.empty()) {
          // The master counts this allocation as placed: end every rank so it
          // frees the slots and reschedules instead of waiting forever.
          for (const auto& r : start.processes()) {
            EnqueueStateLocked(*alloc, r.rank(), av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                               problem);
          }
          av1::AgentMessage m;
          m.mutable_command_result()->set_seq(seq);
          m.mutable_command_result()->set_code(
              static_cast<int>(absl::StatusCode::kFailedPrecondition));
          m.mutable_command_result()->set_message(problem);
          EnqueueLocked(std::move(m));
          return;
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
  }
  spdlog::info("starting allocation {} (trial {}, {} process(es))", id, start.trial_id(),
               start.processes_size());

  // Fails every rank that has not started; ends the allocation's start.
  auto fail_all = [&](absl::Status status) {
    absl::MutexLock lock(&mu_);
    AgentLogLocked(*alloc, std::string(status.message()));
    for (auto& [rank, proc] : alloc->procs) {
      if (proc.process == nullptr && !proc.done) {
        MarkDoneLocked(*alloc, rank);
        EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                           std::string(status.message()));
      }
    }
    alloc->starting = false;
    av1::AgentMessage m;
    m.mutable_command_result()->set_seq(seq);
    m.mutable_command_result()->set_code(static_cast<int>(status.code()));
    m.mutable_command_result()->set_message(std::string(status.message()));
    EnqueueLocked(std::move(m));
  };

  auto so_path = cache_.Get(start.trial_so().sha256(),
                            [this](const std::string& sha, const ArtifactCache::ChunkSink& sink) {
                              return FetchArtifact(sha, sink);
                            });
  if (!so_path.ok()) {
    spdlog::error("allocation {}: artifact fetch failed: {}", id, so_path.status().ToString());
    fail_all(absl::UnavailableError(
        absl::StrCat("artifact fetch failed: ", so_path.status().ToString())));
    return;
  }

  const fs::path dir = fs::path(options_.work_dir) / "allocations" / SafeName(id);
  const fs::path config_path = dir / "config.yaml";
  {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::ofstream out(config_path, std::ios::trunc);
    out << start.config_yaml();
    out.close();
    if (ec || !out) {
      fail_all(absl::InternalError(absl::StrCat("cannot write ", config_path.string(),
                                                ec ? ": " + ec.message() : "")));
      return;
    }
  }

  // The environment common to all ranks.
  std::map<std::string, std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) base_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : start.env()) base_env[k] = v;
  const bool cuda = !options_.devices.empty() &&
                    options_.devices.front().type() == apiv1::DEVICE_TYPE_CUDA;
  const std::string master =
      start.master_address().empty() ? options_.master_address : start.master_address();
  const auto& rdv = start.rendezvous();

  bool any_failed = false;
  std::string first_error;
  for (const auto& spec : start.processes()) {
    const int rank = spec.rank();
    {
      absl::MutexLock lock(&mu_);
      Proc& proc = alloc->procs[rank];
      if (alloc->kill_requested) {
        MarkDoneLocked(*alloc, rank);
        EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                           "killed before start");
        continue;
      }
      EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_STARTING, 0, nullptr, "");
    }
    std::map<std::string, std::string> env = base_env;
    for (const auto& [k, v] : spec.env()) env[k] = v;
    int node_rank = 0;
    for (const auto& r : rdv.ranks()) {
      if (r.rank() == rank) node_rank = r.node_rank();
    }
    env["DET_MASTER"] = master;
    env["DET_MASTER_ADDR"] = master;
    env["DET_ALLOCATION_ID"] = id;
    env["DET_ALLOCATION_TOKEN"] = start.allocation_token();
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
    env["DET_TRIAL_SO"] = *so_path;
    env["DET_CONFIG"] = config_path.string();
    env["DET_AGENT_ID"] = options_.agent_id;
    if (!start.checkpoint_storage_path().empty()) {
      env["DET_CHECKPOINT_STORAGE_PATH"] = start.checkpoint_storage_path();
    }
    if (cuda) {
      env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(spec.device_ids(), ",");
    } else {
      env["CUDA_VISIBLE_DEVICES"] = "";
    }

    LaunchOptions lo;
    lo.argv = {options_.det_trial_path, "--managed", *so_path};
    for (const auto& [k, v] : env) lo.env.push_back(k + "=" + v);
    lo.cwd = dir.string();
    lo.on_line = [this, id, rank](OutputStream s, std::string line) {
      OnLine(id, rank, s, std::move(line));
    };
    lo.on_exit = [this, id, rank](const ExitStatus& st) { OnExit(id, rank, st); };
    auto process = Process::Start(std::move(lo));

    bool kill_now = false;
    absl::Duration grace;
    Process* raw = nullptr;
    {
      absl::MutexLock lock(&mu_);
      Proc& proc = alloc->procs[rank];
      if (!process.ok()) {
        any_failed = true;
        if (first_error.empty()) first_error = std::string(process.status().message());
        MarkDoneLocked(*alloc, rank);
        AgentLogLocked(*alloc, absl::StrCat("rank ", rank, ": ", process.status().message()));
        EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_TERMINATED, 0, nullptr,
                           std::string(process.status().message()));
        continue;
      }
      proc.process = std::move(*process);
      raw = proc.process.get();
      proc.pid = raw->pid();
      proc.running_reported = true;
      EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_RUNNING, proc.pid, nullptr, "");
      spdlog::info("allocation {} rank {}: pid {}", id, rank, proc.pid);
      if (proc.pending_exit) {
        MarkDoneLocked(*alloc, rank);
        EnqueueStateLocked(*alloc, rank, av1::PROCESS_STATE_TERMINATED, proc.pid,
                           &*proc.pending_exit, "");
      }
      kill_now = alloc->kill_requested && !proc.done;
      grace = alloc->kill_grace;
    }
    if (kill_now) raw->Kill(grace);
  }
  {
    absl::MutexLock lock(&mu_);
    alloc->starting = false;
  }
  SendResult(seq, any_failed ? absl::InternalError(first_error) : absl::OkStatus());
}

void Agent::OnLine(const std::string& allocation_id, int rank, OutputStream stream,
                   std::string line) {
  spdlog::debug("[{} rank {} {}] {}", allocation_id, rank,
                stream == OutputStream::kStdout ? "out" : "err", line);
  apiv1::TaskLog log;
  log.set_allocation_id(allocation_id);
  log.set_agent_id(options_.agent_id);
  log.set_rank(rank);
  SetNow(log.mutable_timestamp());
  log.set_level(apiv1::LOG_LEVEL_UNSPECIFIED);
  log.set_stdtype(stream == OutputStream::kStdout ? apiv1::STD_TYPE_STDOUT
                                                  : apiv1::STD_TYPE_STDERR);
  log.set_source("runtime");
  log.set_message(std::move(line));
  absl::MutexLock lock(&mu_);
  auto it = allocations_.find(allocation_id);
  if (it != allocations_.end()) {
    log.set_trial_id(it->second->trial_id);
    log.set_task_id(it->second->task_id);
  }
  if (log_buffer_.size() >= kMaxBufferedLogLines) {
    log_buffer_.pop_front();
    if (dropped_log_lines_++ % 10000 == 0) {
      spdlog::warn("master unreachable: dropping buffered log lines ({} so far)",
                   dropped_log_lines_);
    }
  }
  if (log_buffer_.empty()) log_buffer_since_ = absl::Now();
  log_buffer_.push_back(std::move(log));
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
