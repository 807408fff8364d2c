// det::agent::Agent, part 1 of 3: the session with the master.
// Registration, the Connect stream (commands in, the outbox out, heartbeats),
// reconnects with backoff and artifact fetches. Allocations are in
// allocations.cc, the outbox in outbox.cc.
#include "agent/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/agent_credential.h"
#include "agent/cgroup.h"
#include "agent/trial_env.h"
#include "common/abi_check.h"
#include "common/master_channel.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;
namespace av1 = det::agent::v1;

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
      cache_((fs::path(options_.work_dir) / "cache").string()) {
  if (options_.prestart_pool > 0) {
    PrestartPoolOptions pool;
    pool.size = std::min(options_.prestart_pool, kMaxPrestartPool);
    pool.det_trial_path = options_.det_trial_path;
    for (const auto& [k, v] : AgentEnvironmentForTrials()) pool.env.push_back(k + "=" + v);
    pool_ = std::make_unique<PrestartPool>(std::move(pool));
  }
}

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
  if (!cgroup_parent_.empty()) rmdir(cgroup_parent_.c_str());
}

void Agent::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  for (grpc::ClientContext* ctx : contexts_) ctx->TryCancel();
}

void Agent::AddClusterSecret(grpc::ClientContext* ctx) const {
  // Every AgentService call carries the secret (the master checks it when it
  // has one configured).
  if (!options_.cluster_secret.empty()) ctx->AddMetadata("x-det-cluster-secret", options_.cluster_secret);
}

std::string Agent::CredentialPath() const {
  return options_.credential_path.empty() ? AgentCredentialPath(options_.work_dir) : options_.credential_path;
}

absl::Status Agent::PrepareHost() {
  absl::StatusOr<std::string> credential = ReadAgentCredential(CredentialPath());
  if (!credential.ok()) return credential.status();
  {
    absl::MutexLock lock(&mu_);
    agent_credential_ = *credential;
  }
  if (options_.trial_user || geteuid() == 0) {
    // Trial users (--trial-user, or each det user's own uid) must reach the
    // cache and their allocation's directory, and nothing else here: the
    // credential file stays 0600. 0711: they may pass through, not list
    // (other users' allocations and trial.so files).
    for (const char* sub : {"", "cache", "allocations"}) {
      const std::string d = (fs::path(options_.work_dir) / sub).string();
      std::error_code ec;
      fs::create_directories(d, ec);
      if (ec || chmod(d.c_str(), 0711) != 0) {
        return absl::InternalError(absl::StrCat("cannot make ", d, " reachable by the trial user: ",
                                                ec ? ec.message() : std::strerror(errno)));
      }
    }
  }
  absl::StatusOr<std::string> own = options_.use_cgroups ? OwnCgroupDir() : absl::NotFoundError("--no-cgroups");
  if (own.ok()) {
    const int stale = RemoveStaleAgentCgroups(*own);
    if (stale > 0) spdlog::info("removed {} cgroup(s) of agents that are gone, and what ran in them", stale);
  }
  // Which containment is in force is always logged: a fallback is visible.
  Containment containment = PrepareContainment(options_.use_cgroups, own, getpid());
  cgroup_parent_ = containment.cgroup_parent;
  if (cgroup_parent_.empty() && options_.use_cgroups) {
    spdlog::warn("{}", containment.description);
  } else {
    spdlog::info("{}", containment.description);
  }
  return absl::OkStatus();
}

void Agent::KeepCredential(const std::string& credential) {
  {
    absl::MutexLock lock(&mu_);
    agent_credential_ = credential;
  }
  absl::Status st = WriteAgentCredential(CredentialPath(), credential);
  if (st.ok()) {
    spdlog::info("the master issued agent '{}' its credential; kept in {}", options_.agent_id, CredentialPath());
  } else {
    spdlog::error("cannot keep agent '{}''s credential: {}; a restarted agent will be refused until an operator "
                  "runs det-master --reset-agent {}", options_.agent_id, st.ToString(), options_.agent_id);
  }
}

void Agent::SleepUnlessShutdown(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&shutdown_), d);
}

absl::Status Agent::Run() {
  auto creds = options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials();
  // Reconnect within a second of a restarted master coming back (gRPC's own
  // reconnect backoff would grow to two minutes), see a dead link within
  // seconds (keepalive); Run() adds its backoff.
  grpc::ChannelArguments args;
  SetMasterChannelArgs(&args);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options_.master_address, creds, args);
  stub_ = av1::AgentService::NewStub(channel);
  DET_RETURN_IF_ERROR(PrepareHost());

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
    // A channel that lost its connection redials only while a thread waits
    // on it (master_channel.h); the calls below fail at once until it is
    // connected again, so wait here (bounded: shutdown waits for it).
    channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(2));
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

namespace {

// The ABI manifest of the libraries `det_trial` loads (common/abi_check.h),
// built once per det-trial path; null when they cannot be read (logged: the
// master then skips this agent in its create-time check; tried again at the
// next registration).
std::shared_ptr<const av1::AbiManifest> TrialRuntimeManifest(const std::string& det_trial) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* built = new std::map<std::string, std::shared_ptr<const av1::AbiManifest>>();
  absl::MutexLock lock(&mu);
  auto it = built->find(det_trial);
  if (it != built->end()) return it->second;
  std::shared_ptr<av1::AbiManifest> proto;
  absl::StatusOr<std::vector<std::string>> libs = FindTrialRuntimeLibraries(det_trial);
  absl::StatusOr<AbiManifest> m = libs.ok() ? BuildAbiManifest(*libs) : absl::StatusOr<AbiManifest>(libs.status());
  if (m.ok()) {
    proto = std::make_shared<av1::AbiManifest>();
    proto->mutable_symbol_hashes()->Add(m->symbol_hashes.begin(), m->symbol_hashes.end());
    for (const auto& s : m->sdk_sonames) proto->add_sdk_sonames(s);
    proto->set_sdk_version(m->sdk_version);
    for (const auto& s : m->libraries) proto->add_libraries(s);
    spdlog::info("ABI manifest for the master: {} symbols of {}", m->symbol_hashes.size(),
                 absl::StrJoin(m->libraries, ", "));
  } else {
    spdlog::warn("no ABI manifest for the master (it cannot check trial.so files against this agent): {}",
                 m.status().ToString());
  }
  if (proto) built->emplace(det_trial, proto);
  return proto;
}

}  // namespace

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
  if (auto manifest = TrialRuntimeManifest(options_.det_trial_path)) *req.mutable_abi_manifest() = *manifest;
  std::string previous_token;
  {
    absl::MutexLock lock(&mu_);
    previous_token = session_token_;
    req.set_agent_credential(agent_credential_);
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
  if (!resp.agent_credential().empty()) KeepCredential(resp.agent_credential());

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
        msg = HeartbeatLocked();
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

}  // namespace det::agent
