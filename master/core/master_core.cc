#include "master/core/master_core.h"

#include <filesystem>
#include <random>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/length.h"
#include "common/proto_json.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "common/trial_abi.h"

namespace det::master {
namespace fs = std::filesystem;
namespace {

constexpr char kActive[] = "ACTIVE";
constexpr char kPaused[] = "PAUSED";
constexpr char kCompleted[] = "COMPLETED";
constexpr char kCanceled[] = "CANCELED";
constexpr char kError[] = "ERROR";
constexpr char kStoppingCanceled[] = "STOPPING_CANCELED";
constexpr char kStoppingKilled[] = "STOPPING_KILLED";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool Terminal(const std::string& state) { return state == kCompleted || state == kCanceled || state == kError; }
bool Stopping(const std::string& state) { return state == kStoppingCanceled || state == kStoppingKilled; }


nlohmann::json PlacementsJson(const std::vector<SlotAssignment>& placements) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : placements) out.push_back({{"agent_id", p.agent_id}, {"slots", p.slots}});
  return out;
}

bool ParsePlacements(const std::string& text, std::vector<SlotAssignment>* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return false;
  for (const auto& p : j) {
    if (!p.is_object() || !p.contains("agent_id") || !p["agent_id"].is_string() || !p.contains("slots") ||
        !p["slots"].is_array()) {
      return false;
    }
    SlotAssignment a;
    a.agent_id = p["agent_id"].get<std::string>();
    for (const auto& s : p["slots"]) {
      if (!s.is_number_integer()) return false;
      a.slots.push_back(s.get<int>());
    }
    out->push_back(std::move(a));
  }
  return true;
}

apiv1::State StateEnum(const std::string& s) {
  apiv1::State out = apiv1::STATE_UNSPECIFIED;
  apiv1::State_Parse("STATE_" + s, &out);
  return out;
}

void SetTime(google::protobuf::Timestamp* t, int64_t ms) {
  t->set_seconds(ms / 1000);
  t->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
}

int64_t TimeMs(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out.push_back(kHex[v >> 4]);
    out.push_back(kHex[v & 0xf]);
  }
  return out;
}

apiv1::MetricsReport MetricProto(const MetricRow& r) {
  apiv1::MetricsReport m;
  m.set_id(r.id);
  m.set_trial_id(static_cast<int32_t>(r.trial_id));
  m.set_total_batches(r.total_batches);
  m.set_total_epochs(r.total_epochs);
  m.set_group(r.group);
  for (const auto& [k, v] : r.metrics) (*m.mutable_metrics())[k] = v;
  m.set_archived(r.archived);
  SetTime(m.mutable_end_time(), r.time_ms);
  m.set_trial_run_id(static_cast<int32_t>(r.trial_run_id));
  return m;
}

apiv1::Checkpoint CheckpointProto(const CheckpointRow& r) {
  apiv1::Checkpoint c;
  c.set_uuid(r.uuid);
  c.set_trial_id(static_cast<int32_t>(r.trial_id));
  c.set_experiment_id(static_cast<int32_t>(r.experiment_id));
  apiv1::CheckpointState state = apiv1::CHECKPOINT_STATE_UNSPECIFIED;
  apiv1::CheckpointState_Parse("CHECKPOINT_STATE_" + r.state, &state);
  c.set_state(state);
  c.set_total_batches(r.total_batches);
  for (const auto& [k, v] : r.resources) (*c.mutable_resources())[k] = v;
  c.set_storage_path(r.storage_path);
  SetTime(c.mutable_report_time(), r.time_ms);
  if (r.searcher_metric) c.set_searcher_metric(*r.searcher_metric);
  return c;
}

}  // namespace

// ---------------------------------------------------------------- AgentSession

void AgentSession::Push(agentv1::MasterMessage message) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    queue_.push_back(std::move(message));
  }
  cv_.notify_all();
}

bool AgentSession::Pop(agentv1::MasterMessage* message, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return closed_ || !queue_.empty(); });
  if (closed_ || queue_.empty()) return false;
  *message = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void AgentSession::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool AgentSession::closed() const {
  std::lock_guard<std::mutex> l(mu_);
  return closed_;
}

// ---------------------------------------------------------------- setup

absl::StatusOr<std::unique_ptr<MasterCore>> MasterCore::Create(MasterOptions options) {
  std::error_code ec;
  fs::create_directories(options.data_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create data dir '", options.data_dir, "': ", ec.message()));
  if (options.db_path.empty()) options.db_path = (fs::path(options.data_dir) / "det.db").string();
  if (options.checkpoint_root.empty()) options.checkpoint_root = (fs::path(options.data_dir) / "checkpoints").string();
  options.checkpoint_root = fs::absolute(options.checkpoint_root).string();
  DET_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(options.db_path));
  std::unique_ptr<MasterCore> core(new MasterCore(std::move(options), std::move(store)));
  {
    std::lock_guard<std::mutex> l(core->mu_);
    WriteScope w(core.get());
    DET_RETURN_IF_ERROR(core->LoadFromStore());
  }
  core->background_ = std::thread([c = core.get()] { c->BackgroundLoop(); });
  return core;
}

MasterCore::MasterCore(MasterOptions options, std::unique_ptr<Store> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      artifacts_((fs::path(options_.data_dir) / "artifacts").string()) {}

MasterCore::~MasterCore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    for (auto& [id, agent] : agents_) {
      if (agent->session) agent->session->Close();
    }
  }
  stop_cv_.notify_all();
  preempt_cv_.notify_all();
  if (background_.joinable()) background_.join();
}

MasterCore::WriteScope::~WriteScope() {
  absl::Status st = txn_.Commit();
  if (!st.ok()) spdlog::error("committing the master's state: {}", st.ToString());
  std::vector<std::pair<std::string, agentv1::MasterMessage>> outbox;
  outbox.swap(core_->agent_outbox_);
  for (auto& [agent_id, msg] : outbox) {
    auto it = core_->agents_.find(agent_id);
    if (it != core_->agents_.end() && it->second->session) it->second->session->Push(std::move(msg));
  }
}

void MasterCore::SendToAgentLocked(const std::string& agent_id, agentv1::MasterMessage msg) {
  msg.set_seq(next_seq_++);
  agent_outbox_.emplace_back(agent_id, std::move(msg));
}

void MasterCore::set_trial_master_address(std::string address) {
  std::lock_guard<std::mutex> l(mu_);
  trial_master_address_ = std::move(address);
}

absl::Status MasterCore::LoadFromStore() {
  auto id = store_->GetValue("cluster_id");
  if (!id.ok()) return id.status();
  if (id->has_value()) {
    cluster_id_ = **id;
  } else {
    cluster_id_ = RandomHex(16);
    DET_RETURN_IF_ERROR(store_->PutValue("cluster_id", cluster_id_));
  }
  master_id_ = RandomHex(16);
  // Experiments that were running when the master stopped come back; their
  // trials restart from their latest checkpoints once agents reconnect.
  ExperimentFilter all;
  DET_ASSIGN_OR_RETURN(std::vector<ExperimentRow> rows, store_->ListExperiments(all));
  for (auto& row : rows) {
    auto config = ParseExperimentConfig(row.config_yaml, absl::StrCat("experiment ", row.id));
    if (!config.ok()) {
      spdlog::warn("experiment {}: stored config no longer parses: {}", row.id, config.status().ToString());
      continue;
    }
    auto exp = std::make_unique<ExperimentRuntime>();
    exp->row = row;
    exp->config = *std::move(config);
    auto gbs = GlobalBatchSize(FirstHParams(exp->config.hyperparameters, 0));
    exp->global_batch_size = gbs.ok() ? *gbs : 1;
    int64_t per_epoch = EpochLengthInBatches(exp->global_batch_size, exp->config.records_per_epoch, 0);
    exp->max_length_batches = ToBatches(exp->config.searcher.max_length, exp->global_batch_size, per_epoch).value_or(0);
    if (exp->config.min_validation_period) {
      exp->validation_period =
          ToBatches(*exp->config.min_validation_period, exp->global_batch_size, per_epoch).value_or(0);
    }
    if (exp->config.min_checkpoint_period) {
      exp->checkpoint_period =
          ToBatches(*exp->config.min_checkpoint_period, exp->global_batch_size, per_epoch).value_or(0);
    }
    exp->checkpoint_dir = options_.checkpoint_root;
    if (exp->config.checkpoint_storage) {
      fs::path p = exp->config.checkpoint_storage->host_path;
      if (!exp->config.checkpoint_storage->storage_path.empty()) p /= exp->config.checkpoint_storage->storage_path;
      exp->checkpoint_dir = p.string();
    }
    nlohmann::json snap = nlohmann::json::parse(row.searcher_state_json, nullptr, false);
    auto searcher = snap.is_object() ? Searcher::Restore(exp->config, exp->max_length_batches, snap)
                                     : Searcher::Create(exp->config, exp->max_length_batches);
    if (!searcher.ok()) {
      spdlog::warn("experiment {}: cannot restore its searcher: {}", row.id, searcher.status().ToString());
      continue;
    }
    exp->searcher = std::make_unique<Searcher>(*std::move(searcher));
    exp->search_done = exp->searcher->shutdown();
    DET_ASSIGN_OR_RETURN(std::vector<TrialRow> trials, store_->ListTrials(row.id));
    for (auto& t : trials) {
      auto tr = std::make_unique<TrialRuntime>();
      tr->row = t;
      nlohmann::json seq = nlohmann::json::parse(t.sequencer_state_json, nullptr, false);
      if (seq.is_object()) {
        tr->searcher_target = seq.value("searcher_target", int64_t{0});
        tr->close_requested = seq.value("close_requested", false);
        tr->last_validation = seq.value("last_validation", int64_t{0});
        tr->last_checkpoint = seq.value("last_checkpoint", int64_t{0});
        tr->next_op_id = seq.value("next_op_id", int64_t{1});
        tr->killed = seq.value("killed", false);
        tr->exit_completed = seq.value("exit_completed", false);
        tr->invalid_hp = seq.value("invalid_hp", false);
        tr->error_message = seq.value("error_message", std::string());
      }
      exp->trial_by_request[t.request_id] = t.id;
      trials_[t.id] = std::move(tr);
    }
    exp->gc_pending = true;
    experiments_[row.id] = std::move(exp);
  }
  // Processes that kept running while the master was down are reattached
  // when their agents re-register; every other unfinished trial is resumed
  // from its latest checkpoint, without counting a restart.
  DET_RETURN_IF_ERROR(RecoverAllocations());
  for (auto& [id, exp] : experiments_) {
    std::vector<SearcherOp> ops;
    for (const auto& [req, tid] : exp->trial_by_request) {
      TrialRuntime& t = *trials_.at(tid);
      if (Terminal(t.row.state) || !t.allocation_id.empty()) continue;
      if (t.killed || Stopping(exp->row.state)) {
        t.killed = true;
        SetTrialState(t, kCanceled);
        auto more = exp->searcher->TrialExitedEarly(t.row.request_id, ExitedReason::kUserCanceled);
        ops.insert(ops.end(), more.begin(), more.end());
      } else if (exp->row.state == kPaused) {
        if (t.row.state != kPaused) SetTrialState(t, kPaused);
      } else if (exp->row.state == kActive) {
        if (!CompleteIfCheckpointedLocked(*exp, t, &ops)) RequestAllocation(*exp, t);
      }
    }
    if (!ops.empty()) {
      absl::Status st = ApplySearcherOps(*exp, std::move(ops));
      if (!st.ok()) spdlog::error("experiment {}: {}", id, st.ToString());
    }
    MaybeFinishExperiment(*exp);
  }
  return absl::OkStatus();
}

absl::Status MasterCore::RecoverAllocations() {
  DET_ASSIGN_OR_RETURN(std::vector<AllocationRow> rows, store_->ListAllocations());
  if (rows.empty()) return absl::OkStatus();
  DET_ASSIGN_OR_RETURN(std::vector<AgentRow> agent_rows, store_->ListAgents());
  const int64_t now = NowMs();
  for (const AllocationRow& row : rows) {
    auto tit = trials_.find(row.trial_id);
    auto eit = experiments_.find(row.experiment_id);
    std::vector<SlotAssignment> placements;
    if (tit == trials_.end() || eit == experiments_.end() || Terminal(tit->second->row.state) ||
        !tit->second->allocation_id.empty() || !ParsePlacements(row.placements_json, &placements)) {
      DET_RETURN_IF_ERROR(store_->DeleteAllocation(row.id));
      continue;
    }
    TrialRuntime& trial = *tit->second;
    ExperimentRuntime& exp = *eit->second;
    auto alloc = std::make_unique<AllocationRuntime>();
    alloc->id = row.id;
    alloc->token = row.token;
    alloc->trial_id = row.trial_id;
    alloc->experiment_id = row.experiment_id;
    alloc->placements = placements;
    alloc->processes = static_cast<int>(row.processes);
    alloc->terminated = static_cast<int>(row.terminated);
    alloc->created_ms = row.created_ms;
    if (exp.row.state != kActive || trial.killed) {
      alloc->preempt = true;
      alloc->stop_requested_ms = now;
    }
    for (const auto& p : placements) {
      auto& agent = agents_[p.agent_id];
      if (!agent) {
        agent = std::make_unique<AgentRuntime>();
        agent->row.id = p.agent_id;
        for (const auto& r : agent_rows) {
          if (r.id != p.agent_id) continue;
          agent->row = r;
          nlohmann::json devices = nlohmann::json::parse(r.devices_json, nullptr, false);
          if (devices.is_array()) {
            for (const auto& d : devices) {
              apiv1::Device device;
              if (JsonToMessage(d.dump(), &device).ok()) agent->devices.push_back(device);
            }
          }
        }
        // It has heartbeat_timeout_ms from now to re-register.
        agent->last_heartbeat_ms = now;
      }
      for (int slot : p.slots) {
        agent->used_slots.insert(slot);
        agent->slot_allocation[slot] = row.id;
      }
    }
    trial.allocation_id = row.id;
    spdlog::info("trial {}: allocation {} waits for its agent(s) to re-register", trial.row.id, row.id);
    allocations_[row.id] = std::move(alloc);
  }
  return absl::OkStatus();
}

void MasterCore::BackgroundLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    stop_cv_.wait_for(l, std::chrono::milliseconds(500));
    if (stop_) break;
    std::vector<std::string> doomed;
    {
      WriteScope w(this);
      doomed = BackgroundPassLocked();
    }
    if (doomed.empty()) continue;
    // Deleting checkpoint files is slow disk work: not under the lock. Their
    // rows are already DELETED, so a crash here only leaves files behind.
    l.unlock();
    for (const auto& path : doomed) {
      std::error_code ec;
      fs::remove_all(path, ec);
      if (ec) spdlog::warn("checkpoint GC: cannot delete {}: {}", path, ec.message());
    }
    l.lock();
  }
}

std::vector<std::string> MasterCore::BackgroundPassLocked() {
  const int64_t now = NowMs();
  for (auto& [id, agent] : agents_) {
    if (now - agent->last_heartbeat_ms <= options_.heartbeat_timeout_ms) continue;
    bool has_allocations = false;
    for (const auto& [aid, alloc] : allocations_) {
      for (const auto& p : alloc->placements) has_allocations |= p.agent_id == id;
    }
    if (agent->connected || has_allocations) {
      LoseAgent(*agent, agent->connected ? "missed heartbeats" : "did not reconnect in time");
    }
  }
  // A stop (pause, cancel, kill, preemption) that is not done in time becomes
  // a SIGKILL, so that nothing hangs in STOPPING and slots come back.
  for (auto& [id, alloc] : allocations_) {
    if (alloc->stop_requested_ms == 0 || alloc->force_killed ||
        now - alloc->stop_requested_ms <= options_.stop_timeout_ms) {
      continue;
    }
    std::string why = absl::StrCat("did not stop within ", options_.stop_timeout_ms / 1000.0, " s; killing it");
    spdlog::warn("trial {}: allocation {} {}", alloc->trial_id, id, why);
    TrialLogLocked(alloc->trial_id, id, absl::StrCat("[det-master] allocation ", id, " ", why));
    alloc->force_killed = true;
    KillAllocationLocked(*alloc, "stop timeout", /*grace_seconds=*/0);
  }
  ScheduleLocked();
  std::vector<std::string> doomed;
  for (auto& [id, exp] : experiments_) {
    if (!exp->gc_pending) continue;
    exp->gc_pending = false;
    auto paths = CollectGarbageLocked(*exp);
    doomed.insert(doomed.end(), paths.begin(), paths.end());
  }
  return doomed;
}

// ---------------------------------------------------------------- helpers

absl::StatusOr<MasterCore::ExperimentRuntime*> MasterCore::FindExperiment(int64_t id) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  return it->second.get();
}

absl::StatusOr<MasterCore::TrialRuntime*> MasterCore::FindTrial(int64_t id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  return it->second.get();
}

void MasterCore::SetTrialState(TrialRuntime& trial, const std::string& state) {
  const bool ends = Terminal(state) && !Terminal(trial.row.state);
  trial.row.state = state;
  if (ends) {
    trial.row.ended_ms = NowMs();
    // Its checkpoints are now subject to the experiment's GC policy.
    auto eit = experiments_.find(trial.row.experiment_id);
    if (eit != experiments_.end()) eit->second->gc_pending = true;
    stop_cv_.notify_all();
  }
  nlohmann::json seq = {{"searcher_target", trial.searcher_target},
                        {"close_requested", trial.close_requested},
                        {"last_validation", trial.last_validation},
                        {"last_checkpoint", trial.last_checkpoint},
                        {"next_op_id", trial.next_op_id},
                        {"killed", trial.killed},
                        {"exit_completed", trial.exit_completed},
                        {"invalid_hp", trial.invalid_hp},
                        {"error_message", trial.error_message}};
  trial.row.sequencer_state_json = seq.dump();
  absl::Status st = store_->UpdateTrial(trial.row);
  if (!st.ok()) spdlog::error("saving trial {}: {}", trial.row.id, st.ToString());
}

void MasterCore::SetExperimentState(ExperimentRuntime& exp, const std::string& state) {
  exp.row.state = state;
  if (Terminal(state)) exp.row.ended_ms = NowMs();
  if (exp.searcher) exp.row.progress = exp.searcher->Progress();
  absl::Status st = store_->UpdateExperiment(exp.row);
  if (!st.ok()) spdlog::error("saving experiment {}: {}", exp.row.id, st.ToString());
  spdlog::info("experiment {} is {}", exp.row.id, state);
}

absl::Status MasterCore::SaveSearcher(ExperimentRuntime& exp) {
  exp.row.searcher_state_json = exp.searcher->Snapshot().dump();
  exp.row.progress = exp.searcher->Progress();
  return store_->UpdateExperiment(exp.row);
}

absl::Status MasterCore::ApplySearcherOps(ExperimentRuntime& exp, std::vector<SearcherOp> ops) {
  std::deque<SearcherOp> queue(ops.begin(), ops.end());
  while (!queue.empty()) {
    SearcherOp op = std::move(queue.front());
    queue.pop_front();
    if (auto* create = std::get_if<CreateTrialOp>(&op)) {
      TrialRow row;
      row.experiment_id = exp.row.id;
      row.request_id = create->request_id;
      row.state = kActive;
      row.hparams_json = create->hparams.dump();
      row.seed = create->trial_seed;
      row.created_ms = NowMs();
      DET_ASSIGN_OR_RETURN(row.id, store_->InsertTrial(row));
      auto trial = std::make_unique<TrialRuntime>();
      trial->row = row;
      exp.trial_by_request[create->request_id] = row.id;
      TrialRuntime& t = *trial;
      trials_[row.id] = std::move(trial);
      spdlog::info("experiment {}: created trial {} with hparams {}", exp.row.id, row.id, row.hparams_json);
      for (auto& next : exp.searcher->TrialCreated(create->request_id)) queue.push_back(std::move(next));
      if (Stopping(exp.row.state) || Terminal(exp.row.state)) {
        // The searcher answered a trial that ended under a cancel or kill
        // (e.g. random search filling the freed slot): nothing runs any more,
        // and a trial left ACTIVE would keep the experiment STOPPING forever.
        t.killed = true;
        SetTrialState(t, kCanceled);
      } else if (exp.row.state == kActive) {
        RequestAllocation(exp, t);
      } else if (exp.row.state == kPaused) {
        SetTrialState(t, kPaused);  // activating the experiment starts it
      }
    } else if (auto* validate = std::get_if<ValidateAfterOp>(&op)) {
      auto it = exp.trial_by_request.find(validate->request_id);
      if (it == exp.trial_by_request.end()) continue;
      TrialRuntime& t = *trials_[it->second];
      t.searcher_target = validate->length;
      SetTrialState(t, t.row.state);
      // A trial that waited without a slot (e.g. an ASHA promotion) resumes
      // from its checkpoint.
      if (exp.row.state == kActive && !Terminal(t.row.state)) RequestAllocation(exp, t);
    } else if (auto* close = std::get_if<CloseTrialOp>(&op)) {
      auto it = exp.trial_by_request.find(close->request_id);
      if (it == exp.trial_by_request.end()) continue;
      TrialRuntime& t = *trials_[it->second];
      t.close_requested = true;
      if (t.allocation_id.empty() && !Terminal(t.row.state) && t.row.total_batches > 0 &&
          t.last_checkpoint == t.row.total_batches) {
        // Already checkpointed and off its slot: nothing left to run.
        SetTrialState(t, kCompleted);
        for (auto& next : exp.searcher->TrialClosed(close->request_id)) queue.push_back(std::move(next));
        continue;
      }
      SetTrialState(t, t.row.state);
      if (exp.row.state == kActive && !Terminal(t.row.state)) RequestAllocation(exp, t);
    } else if (std::get_if<ShutdownOp>(&op)) {
      exp.search_done = true;
    }
  }
  DET_RETURN_IF_ERROR(SaveSearcher(exp));
  MaybeFinishExperiment(exp);
  ScheduleLocked();
  return absl::OkStatus();
}

void MasterCore::RequestAllocation(ExperimentRuntime& exp, TrialRuntime& trial) {
  if (!trial.allocation_id.empty()) return;
  // A trial the searcher has nothing for waits without a slot.
  if (trial.searcher_target == 0 && !trial.close_requested) return;
  for (const auto& p : pending_) {
    if (p.group_id == exp.row.id && p.allocation_id.rfind(absl::StrCat("trial-", trial.row.id, "."), 0) == 0) return;
  }
  SchedRequest req;
  req.allocation_id = absl::StrCat("trial-", trial.row.id, ".", trial.row.run_id + 1, ".", RandomHex(4));
  req.group_id = exp.row.id;
  req.resource_pool = exp.config.resources.resource_pool;
  req.slots = static_cast<int>(exp.config.resources.slots_per_trial);
  req.weight = exp.config.resources.weight;
  req.priority = static_cast<int>(exp.config.resources.priority.value_or(42));
  req.submit_order = ++submit_order_;
  pending_.push_back(req);
}

void MasterCore::ScheduleLocked() {
  if (pending_.empty()) return;
  std::vector<SchedAgent> agents;
  for (const auto& [id, a] : agents_) {
    // An agent still running processes the master gave up on has slots
    // taken that the master cannot name: nothing goes there until they end.
    if (!a->connected || !a->zombies.empty()) continue;
    SchedAgent s;
    s.id = id;
    s.resource_pool = a->row.resource_pool;
    s.total_slots = static_cast<int>(a->devices.size());
    s.enabled = a->row.enabled;
    for (const auto& d : a->devices) {
      if (a->used_slots.count(d.id()) == 0) s.free_slots.push_back(d.id());
    }
    agents.push_back(std::move(s));
  }
  std::vector<SchedRunning> running;
  for (const auto& [id, alloc] : allocations_) {
    int slots = 0;
    for (const auto& p : alloc->placements) slots += static_cast<int>(p.slots.size());
    auto exp = experiments_.find(alloc->experiment_id);
    running.push_back({id, alloc->experiment_id,
                       exp != experiments_.end() ? exp->second->config.resources.resource_pool : "default", slots});
  }
  std::vector<Assignment> assignments = Schedule(agents, pending_, running);
  for (const Assignment& a : assignments) {
    auto pit = std::find_if(pending_.begin(), pending_.end(),
                            [&](const SchedRequest& r) { return r.allocation_id == a.allocation_id; });
    if (pit == pending_.end()) continue;
    int64_t exp_id = pit->group_id;
    int64_t trial_id = 0;
    std::sscanf(a.allocation_id.c_str(), "trial-%ld.", &trial_id);
    pending_.erase(pit);
    auto eit = experiments_.find(exp_id);
    auto tit = trials_.find(trial_id);
    if (eit == experiments_.end() || tit == trials_.end()) continue;
    ExperimentRuntime& exp = *eit->second;
    TrialRuntime& trial = *tit->second;
    auto alloc = std::make_unique<AllocationRuntime>();
    alloc->id = a.allocation_id;
    alloc->token = RandomHex(16);
    alloc->trial_id = trial_id;
    alloc->experiment_id = exp_id;
    alloc->placements = a.placements;
    alloc->created_ms = NowMs();
    trial.allocation_id = alloc->id;
    trial.row.run_id += 1;
    trial.current_op.reset();
    trial.exit_completed = false;
    SetTrialState(trial, trial.row.state);
    FillRendezvousLocked(*alloc);
    int rank = 0;
    for (const auto& placement : a.placements) {
      auto ait = agents_.find(placement.agent_id);
      if (ait == agents_.end()) continue;
      AgentRuntime& agent = *ait->second;
      agentv1::MasterMessage msg;
      auto* start = msg.mutable_start_allocation();
      start->set_allocation_id(alloc->id);
      start->set_task_id(absl::StrCat("trial-", trial_id));
      start->set_trial_id(static_cast<int32_t>(trial_id));
      start->set_experiment_id(static_cast<int32_t>(exp_id));
      start->set_allocation_token(alloc->token);
      start->mutable_trial_so()->set_sha256(exp.row.trial_so_sha256);
      start->mutable_trial_so()->set_size_bytes(artifacts_.Size(exp.row.trial_so_sha256).value_or(0));
      start->set_config_yaml(exp.row.config_yaml);
      start->set_master_address(trial_master_address_);
      start->set_checkpoint_storage_path(exp.checkpoint_dir);
      for (const auto& [k, v] : exp.config.environment.environment_variables) (*start->mutable_env())[k] = v;
      int local_rank = 0;
      for (int slot : placement.slots) {
        agent.used_slots.insert(slot);
        agent.slot_allocation[slot] = alloc->id;
        auto* proc = start->add_processes();
        proc->set_rank(rank++);
        proc->set_local_rank(local_rank++);
        proc->add_device_ids(slot);
        alloc->processes++;
      }
      *start->mutable_rendezvous() = alloc->rendezvous;
      // Sent once the allocation is stored (WriteScope).
      SendToAgentLocked(agent.row.id, std::move(msg));
    }
    spdlog::info("trial {}: allocation {} placed on {} process(es)", trial_id, alloc->id, alloc->processes);
    SaveAllocation(*alloc);
    allocations_[alloc->id] = std::move(alloc);
  }
}

void MasterCore::FillRendezvousLocked(AllocationRuntime& alloc) {
  // Ranks in placement order: the first placement's agent is node 0 and
  // holds the chief (rank 0), whose process group store listens on a port
  // of that agent's rendezvous range.
  apiv1::RendezvousInfo& rdv = alloc.rendezvous;
  rdv.Clear();
  alloc.rendezvous_reported.clear();
  int rank = 0;
  int node = 0;
  for (const auto& placement : alloc.placements) {
    auto ait = agents_.find(placement.agent_id);
    std::string address;
    if (ait != agents_.end()) {
      address = ait->second->addresses.empty() ? ait->second->row.hostname : ait->second->addresses.front();
    }
    int local_rank = 0;
    for (int slot : placement.slots) {
      auto* r = rdv.add_ranks();
      r->set_rank(rank++);
      r->set_local_rank(local_rank++);
      r->set_node_rank(node);
      r->set_agent_id(placement.agent_id);
      r->set_address(address);
      r->add_device_ids(slot);
    }
    ++node;
  }
  rdv.set_world_size(rank);
  rdv.set_num_nodes(node);
  if (rank <= 1) return;  // one rank: no process group
  AgentRuntime* chief = nullptr;
  auto cit = agents_.find(rdv.ranks(0).agent_id());
  if (cit != agents_.end()) chief = cit->second.get();
  rdv.set_chief_address(rdv.ranks(0).address());
  if (chief == nullptr) return;
  // A port of the chief agent's range that no other live allocation's chief
  // uses there, round robin so that a port a failed run left busy (or that
  // another program holds) is not picked again right away.
  std::set<int> taken;
  for (const auto& [id, other] : allocations_) {
    if (other.get() != &alloc && other->rendezvous.ranks_size() > 0 &&
        other->rendezvous.ranks(0).agent_id() == chief->row.id) {
      taken.insert(other->rendezvous.chief_port());
    }
  }
  const int n = chief->rendezvous_last - chief->rendezvous_first + 1;
  int port = chief->rendezvous_first + chief->next_rendezvous_port % n;
  for (int i = 0; i < n; ++i) {
    int candidate = chief->rendezvous_first + (chief->next_rendezvous_port + i) % n;
    if (taken.count(candidate) == 0) {
      port = candidate;
      break;
    }
  }
  chief->next_rendezvous_port = (port - chief->rendezvous_first + 1) % n;
  rdv.set_chief_port(port);
}

void MasterCore::KillAllocationLocked(AllocationRuntime& alloc, const std::string& reason, int grace_seconds) {
  alloc.kill_sent = true;
  if (alloc.stop_requested_ms == 0) alloc.stop_requested_ms = NowMs();
  for (const auto& placement : alloc.placements) {
    agentv1::MasterMessage msg;
    msg.mutable_kill_allocation()->set_allocation_id(alloc.id);
    msg.mutable_kill_allocation()->set_grace_period_seconds(grace_seconds);
    msg.mutable_kill_allocation()->set_reason(reason);
    SendToAgentLocked(placement.agent_id, std::move(msg));
  }
}

void MasterCore::RequestStopLocked(AllocationRuntime& alloc) {
  alloc.preempt = true;
  if (alloc.stop_requested_ms == 0) alloc.stop_requested_ms = NowMs();
  preempt_cv_.notify_all();
}

void MasterCore::SaveAllocation(const AllocationRuntime& alloc) {
  AllocationRow row;
  row.id = alloc.id;
  row.trial_id = alloc.trial_id;
  row.experiment_id = alloc.experiment_id;
  row.token = alloc.token;
  row.placements_json = PlacementsJson(alloc.placements).dump();
  row.processes = alloc.processes;
  row.terminated = alloc.terminated;
  row.created_ms = alloc.created_ms;
  absl::Status st = store_->UpsertAllocation(row);
  if (!st.ok()) spdlog::error("saving allocation {}: {}", alloc.id, st.ToString());
}

void MasterCore::TrialLogLocked(int64_t trial_id, const std::string& allocation_id, const std::string& message) {
  TaskLogRow r;
  r.trial_id = trial_id;
  r.allocation_id = allocation_id;
  r.time_ms = NowMs();
  r.level = "LOG_LEVEL_WARNING";
  r.stream = "system";
  r.message = message;
  absl::Status st = store_->InsertTaskLogs({r});
  if (!st.ok()) spdlog::error("trial {}: storing a log line: {}", trial_id, st.ToString());
}

bool MasterCore::CompleteIfCheckpointedLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                              std::vector<SearcherOp>* ops) {
  if (!trial.close_requested || trial.searcher_target > 0 || trial.row.total_batches <= 0 ||
      trial.last_checkpoint != trial.row.total_batches || !trial.allocation_id.empty() || Terminal(trial.row.state)) {
    return false;
  }
  SetTrialState(trial, kCompleted);
  auto more = exp.searcher->TrialClosed(trial.row.request_id);
  ops->insert(ops->end(), more.begin(), more.end());
  return true;
}

void MasterCore::EndAllocation(AllocationRuntime& alloc) {
  rendezvous_cv_.notify_all();  // its ranks' rendezvous waits end
  for (const auto& placement : alloc.placements) {
    auto ait = agents_.find(placement.agent_id);
    if (ait == agents_.end()) continue;
    for (int slot : placement.slots) {
      ait->second->used_slots.erase(slot);
      ait->second->slot_allocation.erase(slot);
    }
  }
}

void MasterCore::OnProcessTerminated(const std::string& allocation_id, int exit_code, const std::string& why,
                                     bool lost) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  AllocationRuntime& alloc = *it->second;
  alloc.terminated++;
  if (lost || exit_code == kExitMasterUnreachable) alloc.lost = true;
  if (!lost && (exit_code == kExitConfigError || exit_code == kExitLibraryError)) alloc.deterministic = true;
  if (exit_code != 0 && !alloc.failed) {
    alloc.failed = true;
    alloc.failed_unasked = alloc.stop_requested_ms == 0;
    alloc.failure = why;
    if (alloc.terminated < alloc.processes) KillAllocationLocked(alloc, "another rank failed", 0);
  }
  if (alloc.terminated < alloc.processes) {
    SaveAllocation(alloc);
    return;
  }

  EndAllocation(alloc);
  absl::Status deleted = store_->DeleteAllocation(allocation_id);
  if (!deleted.ok()) spdlog::error("deleting allocation {}: {}", allocation_id, deleted.ToString());
  std::unique_ptr<AllocationRuntime> done = std::move(it->second);
  allocations_.erase(it);
  auto tit = trials_.find(done->trial_id);
  auto eit = experiments_.find(done->experiment_id);
  if (tit == trials_.end() || eit == experiments_.end()) return;
  TrialRuntime& trial = *tit->second;
  ExperimentRuntime& exp = *eit->second;
  trial.allocation_id.clear();
  trial.current_op.reset();
  // Asked to stop by the master (pause, preemption, stop timeout): however
  // the processes ended, it is not the trial's failure.
  const bool stopped = (done->preempt || done->force_killed) && !done->failed_unasked;
  std::vector<SearcherOp> ops;
  if (trial.exit_completed && !done->failed) {
    SetTrialState(trial, kCompleted);
    ops = exp.searcher->TrialClosed(trial.row.request_id);
  } else if (trial.killed) {
    SetTrialState(trial, kCanceled);
    ops = exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kUserCanceled);
  } else if (trial.invalid_hp) {
    SetTrialState(trial, kError);
    ops = exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kInvalidHp);
  } else if (done->failed && done->deterministic && !done->lost && !stopped) {
    // A bad config or an unusable trial.so fails the same way every time.
    std::string msg = absl::StrCat("trial ", trial.row.id, " failed (", done->failure,
                                   "): a configuration or library error, not retried: ERROR");
    spdlog::warn("{}", msg);
    TrialLogLocked(trial.row.id, done->id, absl::StrCat("[det-master] ", msg));
    if (trial.error_message.empty()) trial.error_message = done->failure;
    SetTrialState(trial, kError);
    ops = exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kErrored);
  } else if (!done->failed || done->lost || stopped) {
    // Paused, preempted, or lost with its agent or master: resumes from its
    // latest checkpoint without counting a restart.
    if (done->failed) {
      std::string msg = absl::StrCat("trial ", trial.row.id, ": allocation ", done->id, " ended (", done->failure,
                                     "); it resumes from its latest checkpoint (not counted as a restart)");
      spdlog::warn("{}", msg);
      TrialLogLocked(trial.row.id, done->id, absl::StrCat("[det-master] ", msg));
    }
    if (exp.row.state == kPaused) {
      SetTrialState(trial, kPaused);
    } else if (exp.row.state == kActive && !CompleteIfCheckpointedLocked(exp, trial, &ops)) {
      SetTrialState(trial, trial.row.state);
      RequestAllocation(exp, trial);
    }
  } else {
    if (trial.row.restarts >= exp.config.max_restarts) {
      std::string msg = absl::StrCat("trial ", trial.row.id, " failed (", done->failure, "); ",
                                     trial.row.restarts, " restart(s) used of max_restarts ",
                                     exp.config.max_restarts, ": ERROR");
      spdlog::warn("{}", msg);
      TrialLogLocked(trial.row.id, done->id, absl::StrCat("[det-master] ", msg));
      if (trial.error_message.empty()) trial.error_message = done->failure;
      SetTrialState(trial, kError);
      ops = exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kErrored);
    } else {
      trial.row.restarts += 1;
      std::string msg = absl::StrCat("trial ", trial.row.id, " failed (", done->failure, "); restart ",
                                     trial.row.restarts, " of ", exp.config.max_restarts,
                                     " from its latest checkpoint");
      spdlog::warn("{}", msg);
      TrialLogLocked(trial.row.id, done->id, absl::StrCat("[det-master] ", msg));
      SetTrialState(trial, trial.row.state);
      if (exp.row.state == kActive) RequestAllocation(exp, trial);
    }
  }
  absl::Status st = ApplySearcherOps(exp, std::move(ops));
  if (!st.ok()) spdlog::error("experiment {}: {}", exp.row.id, st.ToString());
  MaybeFinishExperiment(exp);
}

void MasterCore::MaybeFinishExperiment(ExperimentRuntime& exp) {
  if (Terminal(exp.row.state)) return;
  bool all_ended = true;
  bool any_completed = false;
  for (const auto& [req, tid] : exp.trial_by_request) {
    const TrialRuntime& t = *trials_[tid];
    if (!Terminal(t.row.state) || !t.allocation_id.empty()) all_ended = false;
    if (t.row.state == kCompleted) any_completed = true;
  }
  if (!all_ended) return;
  if (exp.row.state == kStoppingCanceled || exp.row.state == kStoppingKilled) {
    SetExperimentState(exp, kCanceled);
  } else if (exp.search_done) {
    SetExperimentState(exp, any_completed || exp.trial_by_request.empty() ? kCompleted : kError);
  }
}

void MasterCore::LoseAgent(AgentRuntime& agent, const std::string& why) {
  spdlog::warn("agent {} lost: {}", agent.row.id, why);
  agent.connected = false;
  if (agent.session) agent.session->Close();
  agent.session.reset();
  // It must register again, reporting what it still runs (which is killed).
  agent.session_token.clear();
  std::vector<std::string> affected;
  for (const auto& [id, alloc] : allocations_) {
    for (const auto& p : alloc->placements) {
      if (p.agent_id == agent.row.id) affected.push_back(id);
    }
  }
  for (const auto& id : affected) GiveUpAllocationLocked(id, agent.row.id, absl::StrCat("agent ", agent.row.id, " lost: ", why));
}

void MasterCore::GiveUpAllocationLocked(const std::string& allocation_id, const std::string& except_agent,
                                        const std::string& why) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  AllocationRuntime& alloc = *it->second;
  // Ranks on other agents may still run: kill them and keep those agents'
  // slots taken until their heartbeats stop listing the allocation.
  for (const auto& p : alloc.placements) {
    if (p.agent_id == except_agent) continue;
    auto ait = agents_.find(p.agent_id);
    if (ait == agents_.end()) continue;
    ait->second->zombies.insert(allocation_id);
    agentv1::MasterMessage msg;
    msg.mutable_kill_allocation()->set_allocation_id(allocation_id);
    msg.mutable_kill_allocation()->set_grace_period_seconds(0);
    msg.mutable_kill_allocation()->set_reason(why);
    SendToAgentLocked(p.agent_id, std::move(msg));
  }
  int remaining = alloc.processes - alloc.terminated;
  for (int i = 0; i < std::max(remaining, 1) && allocations_.count(allocation_id); ++i) {
    OnProcessTerminated(allocation_id, 137, why, /*lost=*/true);
  }
}

absl::StatusOr<MasterCore::AllocationRuntime*> MasterCore::Authorize(const std::string& allocation_id,
                                                                     const std::string& token) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return absl::NotFoundError(absl::StrCat("allocation '", allocation_id, "' not found"));
  if (it->second->token != token) {
    return absl::PermissionDeniedError(absl::StrCat("bad allocation token for '", allocation_id, "'"));
  }
  return it->second.get();
}

// ---------------------------------------------------------------- det.api.v1

apiv1::GetMasterResponse MasterCore::GetMaster() {
  apiv1::GetMasterResponse resp;
  resp.set_version("0.1.0");
  resp.set_cluster_name(options_.cluster_name);
  resp.set_cluster_id(cluster_id_);
  resp.set_master_id(master_id_);
  SetTime(resp.mutable_start_time(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                         started_wall_.time_since_epoch()).count());
  const auto up = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started_);
  resp.mutable_uptime()->set_seconds(up.count() / 1000);
  resp.mutable_uptime()->set_nanos(static_cast<int32_t>((up.count() % 1000) * 1000000));
  resp.set_max_request_bytes(options_.max_request_bytes());
  resp.set_trial_abi_version(static_cast<int32_t>(kTrialAbiVersion));
  return resp;
}

absl::StatusOr<apiv1::CreateExperimentResponse> MasterCore::CreateExperiment(
    const apiv1::CreateExperimentRequest& req) {
  DET_ASSIGN_OR_RETURN(ExperimentConfig config, ParseExperimentConfig(req.config_yaml(), "config"));
  auto gbs = GlobalBatchSize(FirstHParams(config.hyperparameters, 0));
  if (!gbs.ok()) return gbs.status();
  int64_t per_epoch = EpochLengthInBatches(*gbs, config.records_per_epoch, 0);
  auto max_length = ToBatches(config.searcher.max_length, *gbs, per_epoch, "searcher.max_length");
  if (!max_length.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        max_length.status().message(),
        per_epoch == 0 ? "; set records_per_epoch to use epochs with the master" : ""));
  }
  int64_t val_period = 0, ckpt_period = 0;
  if (config.min_validation_period) {
    DET_ASSIGN_OR_RETURN(val_period, ToBatches(*config.min_validation_period, *gbs, per_epoch, "min_validation_period"));
  }
  if (config.min_checkpoint_period) {
    DET_ASSIGN_OR_RETURN(ckpt_period, ToBatches(*config.min_checkpoint_period, *gbs, per_epoch, "min_checkpoint_period"));
  }
  DET_ASSIGN_OR_RETURN(Searcher searcher, Searcher::Create(config, *max_length));

  std::string sha;
  if (!req.trial_so().empty()) {
    if (static_cast<int64_t>(req.trial_so().size()) > options_.max_trial_so_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("trial.so is ", req.trial_so().size(), " bytes; the limit is ",
                                                     options_.max_trial_so_bytes));
    }
    DET_ASSIGN_OR_RETURN(sha, artifacts_.Put(req.trial_so()));
  } else if (!req.trial_so_sha256().empty()) {
    if (!artifacts_.Has(req.trial_so_sha256())) {
      return absl::InvalidArgumentError(absl::StrCat("trial_so_sha256 ", req.trial_so_sha256(), " was never uploaded"));
    }
    sha = req.trial_so_sha256();
  } else {
    return absl::InvalidArgumentError("trial_so is required: the bytes of the trial library");
  }
  apiv1::CreateExperimentResponse resp;
  for (const auto& w : config.warnings) resp.add_warnings(w);
  if (req.validate_only()) return resp;

  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto exp = std::make_unique<ExperimentRuntime>();
  exp->row.name = config.name;
  exp->row.description = config.description;
  exp->row.labels = config.labels;
  exp->row.state = req.activate() ? kActive : kPaused;
  exp->row.config_yaml = req.config_yaml();
  exp->row.config_json = ExperimentConfigToJson(config).dump();
  exp->row.trial_so_sha256 = sha;
  exp->row.created_ms = NowMs();
  exp->config = std::move(config);
  exp->searcher = std::make_unique<Searcher>(std::move(searcher));
  exp->max_length_batches = *max_length;
  exp->validation_period = val_period;
  exp->checkpoint_period = ckpt_period;
  exp->global_batch_size = *gbs;
  exp->checkpoint_dir = options_.checkpoint_root;
  if (exp->config.checkpoint_storage) {
    fs::path p = exp->config.checkpoint_storage->host_path;
    if (!exp->config.checkpoint_storage->storage_path.empty()) p /= exp->config.checkpoint_storage->storage_path;
    exp->checkpoint_dir = p.string();
  }
  exp->row.searcher_state_json = exp->searcher->Snapshot().dump();
  DET_ASSIGN_OR_RETURN(exp->row.id, store_->InsertExperiment(exp->row));
  int64_t id = exp->row.id;
  ExperimentRuntime& e = *exp;
  experiments_[id] = std::move(exp);
  spdlog::info("created experiment {} '{}' ({} searcher, trial.so {})", id, e.row.name,
               std::string(SearcherNameToString(e.config.searcher.name)), sha.substr(0, 12));
  if (req.activate()) DET_RETURN_IF_ERROR(ApplySearcherOps(e, e.searcher->InitialOperations()));
  *resp.mutable_experiment() = ExperimentProto(e);
  return resp;
}

apiv1::Experiment MasterCore::ExperimentProto(const ExperimentRuntime& exp) {
  apiv1::Experiment e;
  e.set_id(static_cast<int32_t>(exp.row.id));
  e.set_name(exp.row.name);
  e.set_description(exp.row.description);
  for (const auto& l : exp.row.labels) e.add_labels(l);
  e.set_state(StateEnum(exp.row.state));
  e.set_archived(exp.row.archived);
  e.set_config_yaml(exp.row.config_yaml);
  auto cfg = JsonToStruct(nlohmann::json::parse(exp.row.config_json, nullptr, false));
  if (cfg.ok()) *e.mutable_config() = *cfg;
  e.mutable_trial_so()->set_sha256(exp.row.trial_so_sha256);
  e.mutable_trial_so()->set_size_bytes(artifacts_.Size(exp.row.trial_so_sha256).value_or(0));
  e.set_searcher_name(std::string(SearcherNameToString(exp.config.searcher.name)));
  e.set_searcher_metric(exp.config.searcher.metric);
  e.set_smaller_is_better(exp.config.searcher.smaller_is_better);
  e.set_progress(exp.searcher ? exp.searcher->Progress() : exp.row.progress);
  std::optional<double> best;
  int64_t best_trial = 0;
  for (const auto& [req, tid] : exp.trial_by_request) {
    const TrialRuntime& t = *trials_.at(tid);
    (*e.mutable_num_trials_by_state())[t.row.state] += 1;
    if (t.row.best_validation) {
      double v = *t.row.best_validation;
      if (!best || (exp.config.searcher.smaller_is_better ? v < *best : v > *best)) {
        best = v;
        best_trial = tid;
      }
    }
  }
  if (best) {
    e.set_best_validation_metric(*best);
    e.set_best_trial_id(static_cast<int32_t>(best_trial));
  }
  e.set_num_trials(static_cast<int32_t>(exp.trial_by_request.size()));
  SetTime(e.mutable_start_time(), exp.row.created_ms);
  if (exp.row.ended_ms > 0) SetTime(e.mutable_end_time(), exp.row.ended_ms);
  e.set_resource_pool(exp.config.resources.resource_pool);
  *e.mutable_checkpoint_gc_policy() = GcPolicy(exp);
  return e;
}

apiv1::Trial MasterCore::TrialProto(const TrialRuntime& trial) {
  apiv1::Trial t;
  t.set_id(static_cast<int32_t>(trial.row.id));
  t.set_experiment_id(static_cast<int32_t>(trial.row.experiment_id));
  t.set_state(StateEnum(trial.row.state));
  auto hp = JsonToStruct(nlohmann::json::parse(trial.row.hparams_json, nullptr, false));
  if (hp.ok()) *t.mutable_hparams() = *hp;
  t.set_seed(trial.row.seed);
  t.set_restarts(static_cast<int32_t>(trial.row.restarts));
  t.set_total_batches_processed(trial.row.total_batches);
  t.set_latest_checkpoint_uuid(trial.row.latest_checkpoint_uuid);
  if (trial.row.best_validation) {
    auto* m = t.mutable_best_validation();
    m->set_trial_id(t.id());
    m->set_group("validation");
    auto eit = experiments_.find(trial.row.experiment_id);
    if (eit != experiments_.end()) (*m->mutable_metrics())[eit->second->config.searcher.metric] = *trial.row.best_validation;
  }
  if (trial.row.latest_validation) {
    auto* m = t.mutable_latest_validation();
    m->set_trial_id(t.id());
    m->set_group("validation");
    auto eit = experiments_.find(trial.row.experiment_id);
    if (eit != experiments_.end()) (*m->mutable_metrics())[eit->second->config.searcher.metric] = *trial.row.latest_validation;
  }
  SetTime(t.mutable_start_time(), trial.row.created_ms);
  if (trial.row.ended_ms > 0) SetTime(t.mutable_end_time(), trial.row.ended_ms);
  t.set_allocation_id(trial.allocation_id);
  t.set_runner_state(trial.allocation_id.empty() ? apiv1::ALLOCATION_STATE_UNSPECIFIED
                                                 : apiv1::ALLOCATION_STATE_RUNNING);
  t.set_request_id(static_cast<int32_t>(trial.row.request_id));
  t.set_searcher_target_batches(trial.searcher_target);
  t.set_error_message(trial.error_message);
  return t;
}

absl::StatusOr<apiv1::GetExperimentsResponse> MasterCore::GetExperiments(const apiv1::GetExperimentsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  apiv1::GetExperimentsResponse resp;
  std::vector<const ExperimentRuntime*> selected;
  for (const auto& [id, exp] : experiments_) {
    if (!req.name().empty() && exp->row.name.find(req.name()) == std::string::npos) continue;
    if (req.has_archived() && exp->row.archived != req.archived()) continue;
    if (req.states_size() > 0) {
      bool match = false;
      for (int s : req.states()) match |= StateEnum(exp->row.state) == s;
      if (!match) continue;
    }
    if (req.labels_size() > 0) {
      bool match = true;
      for (const auto& want : req.labels()) {
        match &= std::find(exp->row.labels.begin(), exp->row.labels.end(), want) != exp->row.labels.end();
      }
      if (!match) continue;
    }
    selected.push_back(exp.get());
  }
  if (req.order_by() == apiv1::ORDER_BY_DESC) std::reverse(selected.begin(), selected.end());
  int total = static_cast<int>(selected.size());
  int offset = std::clamp(req.offset(), 0, total);
  int end = req.limit() > 0 ? std::min(total, offset + req.limit()) : total;
  for (int i = offset; i < end; ++i) *resp.add_experiments() = ExperimentProto(*selected[i]);
  resp.mutable_pagination()->set_offset(offset);
  resp.mutable_pagination()->set_limit(req.limit());
  resp.mutable_pagination()->set_start_index(offset);
  resp.mutable_pagination()->set_end_index(end);
  resp.mutable_pagination()->set_total(total);
  return resp;
}

absl::StatusOr<apiv1::Experiment> MasterCore::GetExperiment(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  return ExperimentProto(*exp);
}

absl::Status MasterCore::ActivateExperiment(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (exp->row.state == kActive) return absl::OkStatus();
  if (exp->row.state != kPaused) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state, "; only a PAUSED experiment can be activated"));
  }
  SetExperimentState(*exp, kActive);
  std::vector<SearcherOp> ops;
  if (exp->trial_by_request.empty() && !exp->search_done) ops = exp->searcher->InitialOperations();
  for (const auto& [req, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (t.row.state == kPaused) SetTrialState(t, kActive);
    if (!Terminal(t.row.state)) RequestAllocation(*exp, t);
  }
  return ApplySearcherOps(*exp, std::move(ops));
}

absl::Status MasterCore::PauseExperiment(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (exp->row.state == kPaused) return absl::OkStatus();
  if (exp->row.state != kActive) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state, "; only an ACTIVE experiment can be paused"));
  }
  SetExperimentState(*exp, kPaused);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const SchedRequest& r) { return r.group_id == id; }),
                 pending_.end());
  for (const auto& [req, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (Terminal(t.row.state)) continue;
    auto ait = allocations_.find(t.allocation_id);
    if (ait != allocations_.end()) {
      // It checkpoints at its next batch and exits; then it is PAUSED.
      RequestStopLocked(*ait->second);
    } else {
      SetTrialState(t, kPaused);
    }
  }
  return absl::OkStatus();
}

absl::Status MasterCore::CancelExperiment(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (Terminal(exp->row.state)) return absl::OkStatus();
  SetExperimentState(*exp, kStoppingCanceled);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const SchedRequest& r) { return r.group_id == id; }),
                 pending_.end());
  for (const auto& [req, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (Terminal(t.row.state)) continue;
    t.killed = true;
    auto ait = allocations_.find(t.allocation_id);
    if (ait != allocations_.end()) {
      SetTrialState(t, t.row.state);
      RequestStopLocked(*ait->second);
    } else {
      SetTrialState(t, kCanceled);
    }
  }
  MaybeFinishExperiment(*exp);
  return absl::OkStatus();
}

absl::Status MasterCore::KillExperiment(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (Terminal(exp->row.state)) return absl::OkStatus();
  SetExperimentState(*exp, kStoppingKilled);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const SchedRequest& r) { return r.group_id == id; }),
                 pending_.end());
  for (const auto& [req, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (Terminal(t.row.state)) continue;
    t.killed = true;
    auto ait = allocations_.find(t.allocation_id);
    if (ait != allocations_.end()) {
      SetTrialState(t, t.row.state);
      KillAllocationLocked(*ait->second, "experiment killed");
    } else {
      SetTrialState(t, kCanceled);
    }
  }
  MaybeFinishExperiment(*exp);
  return absl::OkStatus();
}

absl::Status MasterCore::KillTrial(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
  if (Terminal(t->row.state)) return absl::OkStatus();
  t->killed = true;
  auto ait = allocations_.find(t->allocation_id);
  if (ait != allocations_.end()) {
    SetTrialState(*t, t->row.state);
    KillAllocationLocked(*ait->second, "trial killed");
    return absl::OkStatus();
  }
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const SchedRequest& r) {
                                  return r.allocation_id.rfind(absl::StrCat("trial-", id, "."), 0) == 0;
                                }),
                 pending_.end());
  SetTrialState(*t, kCanceled);
  auto& exp = *experiments_[t->row.experiment_id];
  return ApplySearcherOps(exp, exp.searcher->TrialExitedEarly(t->row.request_id, ExitedReason::kUserCanceled));
}

absl::StatusOr<apiv1::Experiment> MasterCore::PatchExperiment(const apiv1::PatchExperimentRequest& req) {
  if (req.has_name() && (req.name().empty() || req.name().size() > 255)) {
    return absl::InvalidArgumentError("name: must be 1 to 255 bytes");
  }
  if (req.has_labels()) {
    std::set<std::string> seen;
    for (const auto& label : req.labels().labels()) {
      if (label.empty() || label.size() > 255) return absl::InvalidArgumentError("labels: each must be 1 to 255 bytes");
      if (!seen.insert(label).second) return absl::InvalidArgumentError(absl::StrCat("labels: duplicate '", label, "'"));
    }
  }
  if (req.has_checkpoint_gc_policy()) {
    const auto& p = req.checkpoint_gc_policy();
    if (p.save_experiment_best() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_experiment_best: must be >= 0");
    if (p.save_trial_best() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_trial_best: must be >= 0");
    if (p.save_trial_latest() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_trial_latest: must be >= 0");
  }
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
  if (req.has_name()) exp->row.name = req.name();
  if (req.has_description()) exp->row.description = req.description();
  if (req.has_labels()) exp->row.labels.assign(req.labels().labels().begin(), req.labels().labels().end());
  if (req.has_checkpoint_gc_policy()) {
    const auto& p = req.checkpoint_gc_policy();
    exp->row.checkpoint_gc_policy_json = nlohmann::json{{"save_experiment_best", p.save_experiment_best()},
                                                        {"save_trial_best", p.save_trial_best()},
                                                        {"save_trial_latest", p.save_trial_latest()}}
                                             .dump();
    // Applied to the trials that have ended (by the background loop).
    exp->gc_pending = true;
    stop_cv_.notify_all();
    spdlog::info("experiment {}: checkpoint GC policy {}", exp->row.id, exp->row.checkpoint_gc_policy_json);
  }
  DET_RETURN_IF_ERROR(store_->UpdateExperiment(exp->row));
  return ExperimentProto(*exp);
}

apiv1::CheckpointGcPolicy MasterCore::GcPolicy(const ExperimentRuntime& exp) const {
  apiv1::CheckpointGcPolicy p;
  CheckpointStorageConfig defaults;
  const CheckpointStorageConfig& c = exp.config.checkpoint_storage ? *exp.config.checkpoint_storage : defaults;
  p.set_save_experiment_best(static_cast<int32_t>(c.save_experiment_best));
  p.set_save_trial_best(static_cast<int32_t>(c.save_trial_best));
  p.set_save_trial_latest(static_cast<int32_t>(c.save_trial_latest));
  if (!exp.row.checkpoint_gc_policy_json.empty()) {
    nlohmann::json j = nlohmann::json::parse(exp.row.checkpoint_gc_policy_json, nullptr, false);
    if (j.is_object()) {
      p.set_save_experiment_best(j.value("save_experiment_best", p.save_experiment_best()));
      p.set_save_trial_best(j.value("save_trial_best", p.save_trial_best()));
      p.set_save_trial_latest(j.value("save_trial_latest", p.save_trial_latest()));
    }
  }
  return p;
}

std::vector<std::string> MasterCore::CollectGarbageLocked(ExperimentRuntime& exp) {
  std::vector<std::string> doomed;
  auto rows = store_->ListCheckpoints(exp.row.id, std::nullopt);
  if (!rows.ok()) {
    spdlog::error("experiment {}: checkpoint GC: {}", exp.row.id, rows.status().ToString());
    return doomed;
  }
  const apiv1::CheckpointGcPolicy policy = GcPolicy(exp);
  const bool smaller = exp.config.searcher.smaller_is_better;
  std::vector<const CheckpointRow*> live;
  for (const auto& c : *rows) {
    if (c.state == "COMPLETED") live.push_back(&c);
  }
  auto better = [&](const CheckpointRow* a, const CheckpointRow* b) {
    if (*a->searcher_metric != *b->searcher_metric) {
      return smaller ? *a->searcher_metric < *b->searcher_metric : *a->searcher_metric > *b->searcher_metric;
    }
    return a->total_batches > b->total_batches;
  };
  auto later = [](const CheckpointRow* a, const CheckpointRow* b) {
    return a->total_batches != b->total_batches ? a->total_batches > b->total_batches : a->time_ms > b->time_ms;
  };
  std::set<std::string> keep;
  auto keep_first = [&](std::vector<const CheckpointRow*> v, int64_t n, auto cmp) {
    std::stable_sort(v.begin(), v.end(), cmp);
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(v.size()); ++i) keep.insert(v[i]->uuid);
  };
  std::vector<const CheckpointRow*> scored;
  std::map<int64_t, std::vector<const CheckpointRow*>> by_trial, scored_by_trial;
  for (const CheckpointRow* c : live) {
    by_trial[c->trial_id].push_back(c);
    if (c->searcher_metric && !std::isnan(*c->searcher_metric)) {
      scored.push_back(c);
      scored_by_trial[c->trial_id].push_back(c);
    }
  }
  keep_first(scored, policy.save_experiment_best(), better);
  for (auto& [tid, v] : scored_by_trial) keep_first(v, policy.save_trial_best(), better);
  for (auto& [tid, v] : by_trial) keep_first(v, policy.save_trial_latest(), later);
  for (const CheckpointRow* c : live) {
    if (keep.count(c->uuid)) continue;
    // Only trials that have ended: the others may still resume from theirs.
    auto tit = trials_.find(c->trial_id);
    if (tit == trials_.end() || !Terminal(tit->second->row.state) || !tit->second->allocation_id.empty()) continue;
    absl::Status st = store_->UpdateCheckpointState(c->uuid, "DELETED");
    if (!st.ok()) {
      spdlog::error("checkpoint GC: {}", st.ToString());
      continue;
    }
    if (fs::path(c->storage_path).filename() == c->uuid) doomed.push_back(c->storage_path);
  }
  if (!doomed.empty()) {
    spdlog::info("experiment {}: checkpoint GC deletes {} checkpoint(s)", exp.row.id, doomed.size());
  }
  return doomed;
}

absl::StatusOr<apiv1::GetExperimentTrialsResponse> MasterCore::GetExperimentTrials(
    const apiv1::GetExperimentTrialsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
  apiv1::GetExperimentTrialsResponse resp;
  std::vector<int64_t> ids;
  for (const auto& [r, tid] : exp->trial_by_request) ids.push_back(tid);
  std::sort(ids.begin(), ids.end());
  if (req.order_by() == apiv1::ORDER_BY_DESC) std::reverse(ids.begin(), ids.end());
  int total = static_cast<int>(ids.size());
  int offset = std::clamp(req.offset(), 0, total);
  int end = req.limit() > 0 ? std::min(total, offset + req.limit()) : total;
  for (int i = offset; i < end; ++i) *resp.add_trials() = TrialProto(*trials_[ids[i]]);
  resp.mutable_pagination()->set_total(total);
  resp.mutable_pagination()->set_offset(offset);
  resp.mutable_pagination()->set_end_index(end);
  return resp;
}

absl::StatusOr<std::vector<apiv1::Checkpoint>> MasterCore::GetCheckpoints(std::optional<int64_t> experiment_id,
                                                                          std::optional<int64_t> trial_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (experiment_id) DET_RETURN_IF_ERROR(FindExperiment(*experiment_id).status());
    if (trial_id) DET_RETURN_IF_ERROR(FindTrial(*trial_id).status());
  }
  DET_ASSIGN_OR_RETURN(std::vector<CheckpointRow> rows, store_->ListCheckpoints(experiment_id, trial_id));
  std::vector<apiv1::Checkpoint> out;
  for (const auto& r : rows) out.push_back(CheckpointProto(r));
  return out;
}

absl::StatusOr<apiv1::Checkpoint> MasterCore::GetCheckpoint(const std::string& uuid) {
  DET_ASSIGN_OR_RETURN(CheckpointRow row, store_->GetCheckpoint(uuid));
  return CheckpointProto(row);
}

absl::StatusOr<apiv1::Trial> MasterCore::GetTrial(int64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
  return TrialProto(*t);
}

absl::StatusOr<apiv1::GetTrialMetricsResponse> MasterCore::GetTrialMetrics(const apiv1::GetTrialMetricsRequest& req) {
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(FindTrial(req.trial_id()).status());
  }
  if (!req.group().empty() && req.group() != "training" && req.group() != "validation") {
    return absl::InvalidArgumentError(absl::StrCat("group must be 'training' or 'validation', got '", req.group(), "'"));
  }
  DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                       store_->ListMetrics(req.trial_id(), req.group(), req.include_archived(),
                                           req.after_total_batches() > 0 ? req.after_total_batches() : -1,
                                           req.limit()));
  apiv1::GetTrialMetricsResponse resp;
  for (const auto& r : rows) {
    apiv1::MetricsReport m = MetricProto(r);
    if (req.metric_names_size() > 0) {
      auto* metrics = m.mutable_metrics();
      for (auto it = metrics->begin(); it != metrics->end();) {
        if (std::find(req.metric_names().begin(), req.metric_names().end(), it->first) == req.metric_names().end()) {
          it = metrics->erase(it);
        } else {
          ++it;
        }
      }
    }
    *resp.add_metrics() = std::move(m);
  }
  return resp;
}

absl::StatusOr<std::vector<apiv1::TaskLog>> MasterCore::GetTrialLogs(int64_t trial_id, int64_t after_id, int64_t limit) {
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(FindTrial(trial_id).status());
  }
  DET_ASSIGN_OR_RETURN(std::vector<TaskLogRow> rows, store_->ListTaskLogs(trial_id, after_id, limit));
  std::vector<apiv1::TaskLog> out;
  for (const auto& r : rows) {
    apiv1::TaskLog log;
    log.set_id(r.id);
    log.set_trial_id(static_cast<int32_t>(r.trial_id));
    log.set_allocation_id(r.allocation_id);
    log.set_rank(r.rank);
    SetTime(log.mutable_timestamp(), r.time_ms);
    apiv1::StdType st = apiv1::STD_TYPE_UNSPECIFIED;
    if (r.stream == "stdout") st = apiv1::STD_TYPE_STDOUT;
    if (r.stream == "stderr") st = apiv1::STD_TYPE_STDERR;
    log.set_stdtype(st);
    log.set_message(r.message);
    out.push_back(std::move(log));
  }
  return out;
}

absl::StatusOr<bool> MasterCore::TrialEnded(int64_t trial_id) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(trial_id));
  return Terminal(t->row.state) && t->allocation_id.empty();
}

apiv1::GetAgentsResponse MasterCore::GetAgents() {
  std::lock_guard<std::mutex> l(mu_);
  apiv1::GetAgentsResponse resp;
  for (const auto& [id, a] : agents_) {
    auto* agent = resp.add_agents();
    agent->set_id(id);
    agent->set_hostname(a->row.hostname);
    for (const auto& addr : a->addresses) agent->add_addresses(addr);
    agent->set_resource_pool(a->row.resource_pool);
    agent->set_version(a->row.version);
    SetTime(agent->mutable_registered_time(), a->row.registered_ms);
    SetTime(agent->mutable_last_heartbeat_time(), a->last_heartbeat_ms);
    agent->set_connected(a->connected);
    agent->set_enabled(a->row.enabled);
    std::set<std::string> allocs;
    for (const auto& d : a->devices) {
      auto* slot = agent->add_slots();
      slot->set_id(absl::StrCat(id, "/", d.id()));
      slot->set_agent_id(id);
      *slot->mutable_device() = d;
      slot->set_enabled(a->row.enabled);
      auto sit = a->slot_allocation.find(d.id());
      if (sit != a->slot_allocation.end()) {
        slot->set_allocation_id(sit->second);
        allocs.insert(sit->second);
      }
    }
    for (const auto& al : allocs) agent->add_allocation_ids(al);
  }
  return resp;
}

apiv1::GetSlotsResponse MasterCore::GetSlots() {
  apiv1::GetAgentsResponse agents = GetAgents();
  apiv1::GetSlotsResponse resp;
  for (const auto& a : agents.agents()) {
    for (const auto& s : a.slots()) *resp.add_slots() = s;
  }
  return resp;
}

// ---------------------------------------------------------------- det.agent.v1

absl::StatusOr<agentv1::RegisterAgentResponse> MasterCore::RegisterAgent(const agentv1::RegisterAgentRequest& req) {
  if (req.agent_id().empty()) return absl::InvalidArgumentError("agent_id is required");
  if (req.devices_size() == 0) return absl::InvalidArgumentError(absl::StrCat("agent '", req.agent_id(), "' reports no slots"));
  if ((req.rendezvous_ports().first() != 0 || req.rendezvous_ports().last() != 0) &&
      (req.rendezvous_ports().first() < 1 || req.rendezvous_ports().last() > 65535 ||
       req.rendezvous_ports().first() > req.rendezvous_ports().last())) {
    return absl::InvalidArgumentError(absl::StrCat("agent '", req.agent_id(), "': rendezvous_ports ",
                                                   req.rendezvous_ports().first(), "..", req.rendezvous_ports().last(),
                                                   " is not a port range within 1..65535"));
  }
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto it = agents_.find(req.agent_id());
  if (it != agents_.end() && it->second->connected) {
    bool same_session = !req.previous_session_token().empty() &&
                        req.previous_session_token() == it->second->session_token;
    if (!same_session) {
      return absl::AlreadyExistsError(absl::StrCat("agent '", req.agent_id(),
                                                   "' is already connected; choose another --id"));
    }
    // The same agent whose stream broke: what it runs is reconciled below.
    if (it->second->session) it->second->session->Close();
    it->second->session.reset();
    it->second->connected = false;
  }
  if (it == agents_.end()) it = agents_.emplace(req.agent_id(), std::make_unique<AgentRuntime>()).first;
  AgentRuntime& agent = *it->second;
  agent.row.id = req.agent_id();
  agent.row.hostname = req.hostname();
  agent.row.resource_pool = req.resource_pool().empty() ? "default" : req.resource_pool();
  agent.row.version = req.version();
  if (agent.row.registered_ms == 0) agent.row.registered_ms = NowMs();
  agent.row.last_seen_ms = NowMs();
  agent.devices.assign(req.devices().begin(), req.devices().end());
  agent.addresses.assign(req.addresses().begin(), req.addresses().end());
  if (req.rendezvous_ports().first() != 0 || req.rendezvous_ports().last() != 0) {
    agent.rendezvous_first = req.rendezvous_ports().first();
    agent.rendezvous_last = req.rendezvous_ports().last();
  }
  agent.session_token = RandomHex(16);
  agent.last_heartbeat_ms = NowMs();
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : req.devices()) devices.push_back(nlohmann::json::parse(MessageToJson(d)));
  agent.row.devices_json = devices.dump();
  absl::Status st = store_->UpsertAgent(agent.row);
  if (!st.ok()) return st;
  agentv1::RegisterAgentResponse resp;
  resp.set_session_token(agent.session_token);
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  resp.set_heartbeat_timeout_ms(options_.heartbeat_timeout_ms);
  resp.set_cluster_id(cluster_id_);
  resp.set_enabled(agent.row.enabled);
  // Reconcile what the agent runs with what the master thinks it runs (after
  // a master restart, or a reconnect): what both know is reattached and
  // keeps its slots; what only the master knows ended unseen and resumes
  // from its checkpoint; what only the agent runs is killed, and its slots
  // stay taken until the agent reports it gone.
  std::set<std::string> running(req.running_allocation_ids().begin(), req.running_allocation_ids().end());
  std::vector<std::string> gone;
  for (const auto& [id, alloc] : allocations_) {
    bool here = false;
    for (const auto& p : alloc->placements) here |= p.agent_id == agent.row.id;
    if (!here) continue;
    if (running.count(id)) {
      spdlog::info("agent {}: reattached allocation {} (trial {})", agent.row.id, id, alloc->trial_id);
    } else {
      gone.push_back(id);
    }
  }
  for (const auto& id : gone) {
    GiveUpAllocationLocked(id, agent.row.id, absl::StrCat("not running on agent ", agent.row.id, " when it registered"));
  }
  std::set<std::string> zombies;
  for (const auto& id : running) {
    if (allocations_.count(id)) continue;
    resp.add_kill_allocation_ids(id);
    zombies.insert(id);
  }
  agent.zombies = std::move(zombies);
  if (!agent.zombies.empty()) {
    spdlog::info("agent {}: killing {} allocation(s) the master does not run: {}", agent.row.id,
                 agent.zombies.size(), absl::StrJoin(agent.zombies, ", "));
  }
  spdlog::info("agent {} registered: {} slot(s) in pool {}", agent.row.id, agent.devices.size(), agent.row.resource_pool);
  return resp;
}

absl::StatusOr<std::shared_ptr<AgentSession>> MasterCore::AttachAgent(const std::string& session_token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  for (auto& [id, agent] : agents_) {
    if (!session_token.empty() && agent->session_token == session_token) {
      if (agent->session) agent->session->Close();
      agent->session = std::make_shared<AgentSession>(id);
      agent->connected = true;
      agent->last_heartbeat_ms = NowMs();
      ScheduleLocked();
      return agent->session;
    }
  }
  return absl::UnauthenticatedError("unknown agent session token; register first");
}

void MasterCore::DetachAgent(const std::shared_ptr<AgentSession>& session) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto it = agents_.find(session->agent_id());
  if (it == agents_.end() || it->second->session != session) return;
  // Its processes may well keep running: it has heartbeat_timeout_ms to come
  // back (reconnect or re-register) before its trials are rescheduled.
  spdlog::warn("agent {}: connection closed; its allocations wait {} ms for it to come back", it->first,
               options_.heartbeat_timeout_ms);
  it->second->connected = false;
  it->second->session.reset();
}

void MasterCore::HandleAgentMessage(const std::string& agent_id, const agentv1::AgentMessage& message) {
  if (message.has_logs()) {
    std::vector<TaskLogRow> rows;
    for (const auto& log : message.logs().logs()) {
      TaskLogRow r;
      r.trial_id = log.trial_id();
      r.allocation_id = log.allocation_id();
      r.rank = log.has_rank() ? log.rank() : 0;
      r.time_ms = log.has_timestamp() ? TimeMs(log.timestamp()) : NowMs();
      r.level = apiv1::LogLevel_Name(log.level());
      r.stream = log.stdtype() == apiv1::STD_TYPE_STDERR ? "stderr" : "stdout";
      r.message = log.message();
      if (r.trial_id > 0) rows.push_back(std::move(r));
    }
    if (!rows.empty()) {
      absl::Status st = store_->InsertTaskLogs(rows);
      if (!st.ok()) spdlog::error("storing logs: {}", st.ToString());
    }
    return;
  }
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto it = agents_.find(agent_id);
  if (it == agents_.end()) return;
  AgentRuntime& agent = *it->second;
  agent.last_heartbeat_ms = NowMs();
  if (message.has_heartbeat()) {
    std::set<std::string> running(message.heartbeat().running_allocation_ids().begin(),
                                  message.heartbeat().running_allocation_ids().end());
    for (auto z = agent.zombies.begin(); z != agent.zombies.end();) {
      z = running.count(*z) ? std::next(z) : agent.zombies.erase(z);
    }
    // An allocation the agent has not listed for a while (its start command
    // was lost with a broken stream) is given up.
    const int64_t now = NowMs();
    const int64_t grace = std::max<int64_t>(5000, 3 * options_.heartbeat_interval_ms);
    std::vector<std::string> missing;
    for (auto& [id, alloc] : allocations_) {
      bool here = false;
      for (const auto& p : alloc->placements) here |= p.agent_id == agent_id;
      if (!here) continue;
      if (running.count(id) || now - alloc->created_ms < grace) {
        alloc->missing_since_ms = 0;
      } else if (alloc->missing_since_ms == 0) {
        alloc->missing_since_ms = now;
      } else if (now - alloc->missing_since_ms > grace) {
        missing.push_back(id);
      }
    }
    for (const auto& id : missing) {
      GiveUpAllocationLocked(id, agent_id, absl::StrCat("agent ", agent_id, " does not run it"));
    }
  }
  if (message.has_process_state()) {
    const auto& ps = message.process_state();
    if (ps.state() == agentv1::PROCESS_STATE_TERMINATED) {
      int code = ps.has_exit_code() ? ps.exit_code() : (ps.has_signal_number() ? 128 + ps.signal_number() : 1);
      std::string why = ps.has_signal_number() ? absl::StrCat("rank ", ps.rank(), " killed by signal ", ps.signal_number())
                                               : absl::StrCat("rank ", ps.rank(), " exited with code ", code);
      if (!ps.message().empty()) absl::StrAppend(&why, ": ", ps.message());
      OnProcessTerminated(ps.allocation_id(), code, why);
    }
  }
}

// ---------------------------------------------------------------- det.trial.v1

absl::StatusOr<trialv1::GetTrialContextResponse> MasterCore::GetTrialContext(const trialv1::GetTrialContextRequest& req,
                                                                              const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  const int world = std::max(alloc->rendezvous.world_size(), 1);
  if (req.rank() < 0 || (alloc->rendezvous.world_size() > 0 && req.rank() >= world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", req.rank(), " is outside [0, ", world, ") of allocation '", alloc->id, "'"));
  }
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  trialv1::GetTrialContextResponse resp;
  resp.set_trial_id(static_cast<int32_t>(trial.row.id));
  resp.set_experiment_id(static_cast<int32_t>(exp.row.id));
  resp.set_task_id(absl::StrCat("trial-", trial.row.id));
  DET_ASSIGN_OR_RETURN(*resp.mutable_hparams(), JsonToStruct(nlohmann::json::parse(trial.row.hparams_json, nullptr, false)));
  resp.set_trial_seed(trial.row.seed);
  resp.set_config_yaml(exp.row.config_yaml);
  nlohmann::json hp = nlohmann::json::parse(trial.row.hparams_json, nullptr, false);
  auto gbs = GlobalBatchSize(hp);
  resp.set_global_batch_size(gbs.ok() ? *gbs : exp.global_batch_size);
  resp.set_trial_run_id(static_cast<int32_t>(trial.row.run_id));
  resp.set_checkpoint_storage_path(exp.checkpoint_dir);
  resp.set_scheduling_unit(exp.config.scheduling_unit);
  resp.set_trial_so_sha256(exp.row.trial_so_sha256);
  *resp.mutable_rendezvous() = alloc->rendezvous;
  int64_t restored_batches = 0;
  if (!trial.row.latest_checkpoint_uuid.empty()) {
    auto ck = store_->GetCheckpoint(trial.row.latest_checkpoint_uuid);
    if (ck.ok()) {
      auto* c = resp.mutable_latest_checkpoint();
      c->set_uuid(ck->uuid);
      c->set_storage_path(ck->storage_path);
      c->set_total_batches(ck->total_batches);
      restored_batches = ck->total_batches;
    }
  }
  if (req.rank() == 0 && trial.row.run_id > 1) {
    // A restart continues from the checkpoint: what the earlier run reported
    // after it is archived, and the sequencer rewinds to it.
    absl::Status st = store_->ArchiveMetricsAfter(trial.row.id, restored_batches);
    if (!st.ok()) spdlog::error("trial {}: archiving metrics: {}", trial.row.id, st.ToString());
    trial.row.total_batches = restored_batches;
    // The last validation the restored run has behind it, so that the next
    // ones fall where an uninterrupted run's do.
    if (trial.last_validation > restored_batches) {
      trial.last_validation = 0;
      auto validations = store_->ListMetrics(trial.row.id, "validation", /*include_archived=*/false);
      if (validations.ok() && !validations->empty()) trial.last_validation = validations->back().total_batches;
    }
    trial.last_checkpoint = restored_batches;
    trial.current_op.reset();
    SetTrialState(trial, trial.row.state);
  }
  return resp;
}

absl::StatusOr<trialv1::AllocationRendezvousResponse> MasterCore::AllocationRendezvous(
    const trialv1::AllocationRendezvousRequest& req, const std::string& token, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> l(mu_);
  const std::string id = req.allocation_id();
  {
    WriteScope w(this);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(id, token));
    apiv1::RendezvousInfo& rdv = alloc->rendezvous;
    if (req.rank() < 0 || req.rank() >= rdv.ranks_size()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", req.rank(), " is outside [0, ", rdv.ranks_size(),
                                                     ") of allocation '", id, "'"));
    }
    if (req.port() < 0 || req.port() > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("port ", req.port(), " is not a TCP port"));
    }
    apiv1::RankInfo* r = rdv.mutable_ranks(req.rank());
    if (!req.address().empty()) r->set_address(req.address());
    r->set_port(req.port());
    if (req.rank() == 0 && !req.address().empty()) rdv.set_chief_address(req.address());
    alloc->rendezvous_reported.insert(req.rank());
  }
  rendezvous_cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    auto it = allocations_.find(id);
    if (it == allocations_.end() || it->second->token != token) {
      return absl::FailedPreconditionError(absl::StrCat("allocation '", id, "' ended during the rendezvous"));
    }
    AllocationRuntime& alloc = *it->second;
    if (static_cast<int>(alloc.rendezvous_reported.size()) >= alloc.rendezvous.ranks_size()) {
      trialv1::AllocationRendezvousResponse resp;
      *resp.mutable_rendezvous() = alloc.rendezvous;
      return resp;
    }
    if (rendezvous_cv_.wait_until(l, deadline) == std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "allocation '", id, "': ", alloc.rendezvous_reported.size(), " of ", alloc.rendezvous.ranks_size(),
          " ranks reached the rendezvous within ", wait.count(), " ms"));
    }
  }
}

trialv1::Operation MasterCore::NextOperation(ExperimentRuntime& exp, TrialRuntime& trial, AllocationRuntime& alloc,
                                             int64_t batches) {
  auto make = [&](trialv1::OperationKind kind, int64_t target = 0) {
    trialv1::Operation op;
    op.set_op_id(trial.next_op_id++);
    op.set_kind(kind);
    op.set_target_total_batches(target);
    op.set_preempting(alloc.preempt);
    return op;
  };
  if (alloc.preempt || exp.row.state != kActive) {
    if (trial.last_checkpoint != batches && batches > 0) return make(trialv1::OPERATION_KIND_CHECKPOINT);
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(trial.killed ? trialv1::EXIT_REASON_STOPPED : trialv1::EXIT_REASON_PREEMPTED);
    RequestStopLocked(alloc);
    return op;
  }
  if (trial.searcher_target > 0) {
    if (batches < trial.searcher_target) {
      bool val_due = exp.validation_period > 0 && batches - trial.last_validation >= exp.validation_period &&
                     trial.last_validation != batches;
      bool ckpt_due = exp.checkpoint_period > 0 && batches - trial.last_checkpoint >= exp.checkpoint_period &&
                      trial.last_checkpoint != batches;
      if (val_due) return make(trialv1::OPERATION_KIND_VALIDATE);
      if (ckpt_due) return make(trialv1::OPERATION_KIND_CHECKPOINT);
      int64_t target = trial.searcher_target;
      if (exp.validation_period > 0) target = std::min(target, trial.last_validation + exp.validation_period);
      if (exp.checkpoint_period > 0) target = std::min(target, trial.last_checkpoint + exp.checkpoint_period);
      if (target <= batches) target = trial.searcher_target;
      return make(trialv1::OPERATION_KIND_TRAIN, target);
    }
    // At the searcher's length: validate (the searcher op completes when the
    // metric arrives).
    return make(trialv1::OPERATION_KIND_VALIDATE);
  }
  if (trial.close_requested) {
    if (trial.last_checkpoint != batches) return make(trialv1::OPERATION_KIND_CHECKPOINT);
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(trialv1::EXIT_REASON_COMPLETED);
    trial.exit_completed = true;
    if (alloc.stop_requested_ms == 0) alloc.stop_requested_ms = NowMs();
    return op;
  }
  // The searcher has nothing for this trial now (e.g. ASHA: not promoted
  // yet): checkpoint and give the slot back; a later ValidateAfter resumes it.
  if (batches > 0 && trial.last_checkpoint != batches) return make(trialv1::OPERATION_KIND_CHECKPOINT);
  if (batches > 0) {
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(trialv1::EXIT_REASON_PREEMPTED);
    RequestStopLocked(alloc);
    return op;
  }
  return make(trialv1::OPERATION_KIND_WAIT);
}

absl::StatusOr<trialv1::GetNextOperationResponse> MasterCore::GetNextOperation(
    const trialv1::GetNextOperationRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  if (req.total_batches() > trial.row.total_batches || trial.row.total_batches == 0) {
    trial.row.total_batches = req.total_batches();
  }
  trialv1::GetNextOperationResponse resp;
  if (trial.current_op && trial.current_op->op_id() != req.completed_op_id() &&
      trial.current_op->kind() != trialv1::OPERATION_KIND_WAIT) {
    // A retry of the same question: the same answer.
    *resp.mutable_operation() = *trial.current_op;
    return resp;
  }
  trial.current_op = NextOperation(exp, trial, *alloc, req.total_batches());
  // Persists the op counter and exit_completed with the batches trained.
  SetTrialState(trial, trial.row.state);
  *resp.mutable_operation() = *trial.current_op;
  return resp;
}

absl::Status MasterCore::ReportTrainingMetrics(const trialv1::ReportTrainingMetricsRequest& req,
                                               const std::string& token) {
  int64_t trial_id, run_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    TrialRuntime& trial = *trials_.at(alloc->trial_id);
    trial_id = trial.row.id;
    run_id = trial.row.run_id;
    for (const auto& r : req.rows()) trial.row.total_batches = std::max(trial.row.total_batches, r.total_batches());
  }
  std::vector<MetricRow> rows;
  for (const auto& r : req.rows()) {
    MetricRow m;
    m.trial_id = trial_id;
    m.trial_run_id = run_id;
    m.group = "training";
    m.total_batches = r.total_batches();
    m.total_epochs = r.total_epochs();
    m.metrics.insert(r.metrics().begin(), r.metrics().end());
    m.time_ms = r.has_end_time() ? TimeMs(r.end_time()) : NowMs();
    rows.push_back(std::move(m));
  }
  return store_->InsertMetrics(rows);
}

absl::Status MasterCore::ReportValidationMetrics(const trialv1::ReportValidationMetricsRequest& req,
                                                 const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  std::vector<MetricRow> rows;
  for (const auto& r : req.rows()) {
    MetricRow m;
    m.trial_id = trial.row.id;
    m.trial_run_id = trial.row.run_id;
    m.group = "validation";
    m.total_batches = r.total_batches();
    m.total_epochs = r.total_epochs();
    m.metrics.insert(r.metrics().begin(), r.metrics().end());
    m.time_ms = r.has_end_time() ? TimeMs(r.end_time()) : NowMs();
    auto it = r.metrics().find(exp.config.searcher.metric);
    if (it != r.metrics().end()) {
      double v = it->second;
      trial.row.latest_validation = v;
      if (!trial.row.best_validation ||
          (exp.config.searcher.smaller_is_better ? v < *trial.row.best_validation : v > *trial.row.best_validation)) {
        trial.row.best_validation = v;
      }
    }
    trial.last_validation = r.total_batches();
    trial.row.total_batches = std::max(trial.row.total_batches, r.total_batches());
    rows.push_back(std::move(m));
  }
  DET_RETURN_IF_ERROR(store_->InsertMetrics(rows));
  SetTrialState(trial, trial.row.state);
  return absl::OkStatus();
}

absl::Status MasterCore::ReportCheckpoint(const trialv1::ReportCheckpointRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  DET_RETURN_IF_ERROR(ValidatePathComponent(req.uuid(), "uuid"));
  auto existing = store_->GetCheckpoint(req.uuid());
  if (existing.ok()) {
    if (existing->trial_id != trial.row.id) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint ", req.uuid(), " belongs to trial ", existing->trial_id));
    }
    // A retried report (the reply was lost, e.g. to a master restart).
    trial.row.latest_checkpoint_uuid = existing->uuid;
    trial.last_checkpoint = existing->total_batches;
    SetTrialState(trial, trial.row.state);
    return absl::OkStatus();
  }
  CheckpointRow row;
  row.uuid = req.uuid();
  row.trial_id = trial.row.id;
  row.experiment_id = exp.row.id;
  row.trial_run_id = trial.row.run_id;
  row.state = "COMPLETED";
  row.total_batches = req.total_batches();
  row.total_epochs = req.total_epochs();
  row.resources.insert(req.resources().begin(), req.resources().end());
  row.metadata_json = StructToJson(req.metadata()).dump();
  DET_ASSIGN_OR_RETURN(row.storage_path, JoinUnder(exp.checkpoint_dir, req.uuid(), "uuid"));
  row.time_ms = NowMs();
  if (trial.last_validation == req.total_batches() && trial.row.latest_validation) {
    row.searcher_metric = trial.row.latest_validation;
  }
  DET_RETURN_IF_ERROR(store_->InsertCheckpoint(row));
  trial.row.latest_checkpoint_uuid = row.uuid;
  trial.last_checkpoint = req.total_batches();
  SetTrialState(trial, trial.row.state);
  return absl::OkStatus();
}

absl::Status MasterCore::CompleteSearcherOperation(const trialv1::CompleteSearcherOperationRequest& req,
                                                   const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  trial.last_validation = trial.row.total_batches;
  if (trial.searcher_target > 0 && trial.row.total_batches >= trial.searcher_target) {
    int64_t length = trial.searcher_target;
    trial.searcher_target = 0;
    SetTrialState(trial, trial.row.state);
    return ApplySearcherOps(exp, exp.searcher->ValidationCompleted(trial.row.request_id, req.searcher_metric(), length));
  }
  return absl::OkStatus();
}

absl::Status MasterCore::ReportEarlyExit(const trialv1::ReportEarlyExitRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  trial.error_message = req.message();
  if (req.reason() == trialv1::EARLY_EXIT_REASON_INVALID_HP) trial.invalid_hp = true;
  SetTrialState(trial, trial.row.state);
  return absl::OkStatus();
}

absl::StatusOr<bool> MasterCore::ShouldPreempt(const trialv1::ShouldPreemptRequest& req, const std::string& token) {
  std::unique_lock<std::mutex> l(mu_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(req.timeout_ms(), 0, 60000));
  while (true) {
    auto alloc = Authorize(req.allocation_id(), token);
    if (!alloc.ok()) return alloc.status();
    if ((*alloc)->preempt) return true;
    if (stop_ || preempt_cv_.wait_until(l, deadline) == std::cv_status::timeout) {
      auto again = Authorize(req.allocation_id(), token);
      if (!again.ok()) return again.status();
      return (*again)->preempt;
    }
  }
}

absl::Status MasterCore::AckPreemption(const trialv1::AckPreemptionRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  return Authorize(req.allocation_id(), token).status();
}

absl::Status MasterCore::AuthorizeAllocation(const std::string& allocation_id, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  return Authorize(allocation_id, token).status();
}

absl::Status MasterCore::ReportTrialLogs(const trialv1::ReportTrialLogsRequest& req, const std::string& token) {
  int64_t trial_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    trial_id = alloc->trial_id;
  }
  std::vector<TaskLogRow> rows;
  for (const auto& log : req.logs()) {
    TaskLogRow r;
    r.trial_id = trial_id;
    r.allocation_id = req.allocation_id();
    r.rank = log.has_rank() ? log.rank() : 0;
    r.time_ms = log.has_timestamp() ? TimeMs(log.timestamp()) : NowMs();
    r.stream = "stdout";
    r.message = log.message();
    rows.push_back(std::move(r));
  }
  return store_->InsertTaskLogs(rows);
}

}  // namespace det::master
