#include "trial_runtime/runtime/managed_mode.h"

#include <grpcpp/grpcpp.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "spdlog/spdlog.h"
#include "common/grpc_status.h"
#include "common/proto_json.h"
#include "common/utf8.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "trial_runtime/runtime/distributed.h"
#include "trial_runtime/runtime/managed_s3.h"
#include "trial_runtime/runtime/master_client.h"
#include "trial_runtime/runtime/master_preemption.h"
#include "trial_runtime/runtime/operation_relay.h"
#include "trial_runtime/runtime/allocation_token.h"
#include "trial_runtime/runtime/process_setup.h"
#include "trial_runtime/runtime/trial_controller.h"
#include "trial_runtime/runtime/trial_loader.h"
#include "trial_runtime/runtime/warm_start.h"

namespace det::runtime {
namespace {

namespace tv1 = ::det::trial::v1;
using Clock = std::chrono::steady_clock;

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

tv1::MetricsRow Row(int64_t total_batches, double epochs, const MetricsMap& metrics, int64_t gbs) {
  tv1::MetricsRow row;
  row.set_total_batches(total_batches);
  row.set_total_records(total_batches * gbs);
  row.set_total_epochs(epochs);
  // A name that is not UTF-8 would fail the whole report's parse: U+FFFD instead.
  for (const auto& [k, v] : metrics) (*row.mutable_metrics())[Utf8Sanitized(k)] = v;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  row.mutable_end_time()->set_seconds(ms / 1000);
  row.mutable_end_time()->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
  return row;
}

// A training or report_metrics report the master refused for a metric
// bound (RESOURCE_EXHAUSTED: --max-trial-metric-names and the like) is
// said on stderr (the first, then every 100th) and dropped: training goes
// on. A refused validation fails the trial (the searcher needs it). Used on
// the report queue's sender threads (several may filter at once).
class RefusedReports {
 public:
  absl::Status Filter(absl::Status s, const char* what) {
    if (s.code() != absl::StatusCode::kResourceExhausted) return s;
    std::lock_guard<std::mutex> l(mu_);
    const long long n = ++refused_;
    // The first refusal for each bound (named by its flag), then every 100th.
    const std::string message(s.message());
    const size_t at = message.find("(det-master ");
    const std::string bound = at == std::string::npos ? "" : message.substr(at, message.find(')', at) - at);
    const bool first = bounds_seen_.size() < 16 && bounds_seen_.insert(bound).second;
    if (first || n % 100 == 0) {
      std::fprintf(stderr, "[det-trial] metrics refused by the master (%lld refused reports so far; training goes on "
                   "without them): %s: %s\n", n, what, message.c_str());
      std::fflush(stderr);
    }
    return absl::OkStatus();
  }

 private:
  std::mutex mu_;
  long long refused_ = 0;                  // guarded by mu_: reports refused for a metric bound
  std::set<std::string> bounds_seen_;      // guarded by mu_
};

class MasterReporter final : public Reporter {
 public:
  MasterReporter(MasterClient* client, int64_t gbs, bool chief) : client_(client), gbs_(gbs), chief_(chief) {}
  absl::Status ReportTrainingMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) override {
    std::printf("[det-trial] training   batches %-7lld epochs %-8.4f%s\n", static_cast<long long>(total_batches),
                epochs, Format(metrics).c_str());
    std::fflush(stdout);
    if (!chief_) return absl::OkStatus();
    tv1::ReportTrainingMetricsRequest req;
    *req.add_rows() = Row(total_batches, epochs, metrics, gbs_);
    return client_->Post<tv1::ReportTrainingMetricsRequest, tv1::ReportTrainingMetricsResponse>(
        "ReportTrainingMetrics", &tv1::TrialService::Stub::ReportTrainingMetrics, req,
        [refused = refused_](absl::Status s) { return refused->Filter(std::move(s), "training metrics"); });
  }
  absl::Status ReportValidationMetrics(int64_t total_batches, double epochs, const MetricsMap& metrics) override {
    std::printf("[det-trial] validation batches %-7lld epochs %-8.4f%s\n", static_cast<long long>(total_batches),
                epochs, Format(metrics).c_str());
    std::fflush(stdout);
    if (!chief_) return absl::OkStatus();
    tv1::ReportValidationMetricsRequest req;
    *req.add_rows() = Row(total_batches, epochs, metrics, gbs_);
    return client_->Post<tv1::ReportValidationMetricsRequest, tv1::ReportValidationMetricsResponse>(
        "ReportValidationMetrics", &tv1::TrialService::Stub::ReportValidationMetrics, req);
  }
  absl::Status ReportMetrics(const std::string& group, int64_t total_batches, double epochs,
                             const MetricsMap& metrics) override {
    if (!chief_) return absl::OkStatus();
    tv1::ReportMetricsRequest req;
    req.set_group(group);
    *req.add_rows() = Row(total_batches, epochs, metrics, gbs_);
    return client_->Post<tv1::ReportMetricsRequest, tv1::ReportMetricsResponse>(
        "ReportMetrics", &tv1::TrialService::Stub::ReportMetrics, req,
        [refused = refused_](absl::Status s) { return refused->Filter(std::move(s), "report_metrics"); });
  }
  absl::Status ReportCheckpoint(const SavedCheckpoint& checkpoint, int64_t total_batches) override {
    std::printf("[det-trial] checkpoint batches %-7lld %s\n", static_cast<long long>(total_batches),
                checkpoint.path.c_str());
    std::fflush(stdout);
    if (!chief_) return absl::OkStatus();
    tv1::ReportCheckpointRequest req;
    req.set_uuid(checkpoint.uuid);
    req.set_total_batches(total_batches);
    req.set_total_records(total_batches * gbs_);
    for (const auto& [k, v] : checkpoint.resources) (*req.mutable_resources())[k] = v;
    return client_->Post<tv1::ReportCheckpointRequest, tv1::ReportCheckpointResponse>(
        "ReportCheckpoint", &tv1::TrialService::Stub::ReportCheckpoint, req);
  }

 private:
  static std::string Format(const MetricsMap& metrics) {
    std::string out;
    char buf[64];
    for (const auto& [k, v] : metrics) {
      std::snprintf(buf, sizeof(buf), " %.6g", v);
      out += " " + k + buf;
    }
    return out;
  }
  MasterClient* client_;
  int64_t gbs_;
  bool chief_;
  // Shared with the reports queued: they may outlive this reporter.
  std::shared_ptr<RefusedReports> refused_ = std::make_shared<RefusedReports>();
};

// Ends the run on an error. A config or library error (codes 2 and 3) fails
// the same way every time: the master does not retry those; a setup error
// (code 5) it retries once. A run that lost its master or allocation exits
// kExitMasterUnreachable, which the master does not count as a restart,
// unless `deterministic` (the code is the trial's fault however the master
// is doing). The message reported is bounded (ReportableMessage).
//
// When a queued report failed (the master refused it), that refusal is what
// is reported: `status` is then only its consequence, and the early exit is
// sent at once, not behind the failed queue (the master keeps an
// allocation's first early-exit report). Otherwise it follows the queued
// reports, as every call does.
int Fail(int code, MasterClient* client, const absl::Status& status, bool deterministic) {
  std::fprintf(stderr, "det-trial: error: %s\n", std::string(status.message()).c_str());
  if (client != nullptr && client->lost() && !deterministic) return kExitMasterUnreachable;
  if (client != nullptr) {
    absl::Status why = client->QueueError();
    const bool queue_failed = !why.ok();
    if (queue_failed && why != status) {
      std::fprintf(stderr, "det-trial: error: a report to the master failed: %s\n", std::string(why.message()).c_str());
    }
    if (why.ok()) why = status;
    tv1::ReportEarlyExitRequest req;
    req.set_reason(tv1::EARLY_EXIT_REASON_ERRORED);
    req.set_message(ReportableMessage(why.message()));
    tv1::ReportEarlyExitResponse resp;
    absl::Status sent = client->Call("ReportEarlyExit", &tv1::TrialService::Stub::ReportEarlyExit, req, &resp,
                                     std::chrono::seconds(5), /*retry_deadline_exceeded=*/true,
                                     /*flush_first=*/!queue_failed);
    // A queued report refused while flushing: that refusal, at once.
    if (absl::Status refused = client->QueueError(); !sent.ok() && !queue_failed && !refused.ok()) {
      std::fprintf(stderr, "det-trial: error: a report to the master failed: %s\n",
                   std::string(refused.message()).c_str());
      req.set_message(ReportableMessage(refused.message()));
      (void)client->Call("ReportEarlyExit", &tv1::TrialService::Stub::ReportEarlyExit, req, &resp,
                         std::chrono::seconds(5), /*retry_deadline_exceeded=*/true, /*flush_first=*/false);
    }
  }
  std::fflush(stderr);
  return code;
}

// One rank of a managed allocation, step by step: FetchContext (the
// trial's context from the master, its config and library), JoinProcessGroup
// (threads, seed and, for a distributed trial, the process group),
// BuildTrial (the trial, its reporter, preemption source and controller),
// RestoreLatestCheckpoint, then the operations: the chief asks the master
// for them (PerformOperations), the other ranks follow the chief.
//
// Each step returns std::nullopt to go on, or the exit code that ends the
// run (Fail has printed and reported the error). Members are declared in the
// order the steps make them, so that they are destroyed in reverse. Not
// thread-safe; one per process.
class ManagedRank {
 public:
  // Requires `client` to outlive this object.
  ManagedRank(MasterClient* client, int rank) : client_(*client), rank_(rank) {}

  // Runs the rank to its end; returns the process exit code.
  int Run(const std::string& trial_path, int threads);

 private:
  std::optional<int> FetchContext(const std::string& trial_path);
  // S3 checkpoint storage (staging and the master's credentials) when the
  // experiment's storage or a checkpoint to restore is in S3.
  std::optional<int> OpenS3();
  std::optional<int> JoinProcessGroup(int threads);
  // Every rank reports to the master and waits for the others there before
  // joining the process group.
  std::optional<int> Rendezvous();
  std::optional<int> BuildTrial();
  int FailSetup(const absl::Status& status);
  // A call to the master failed: reported only when a queued report's
  // refusal failed it (the master's answer to the call itself needs none).
  int FailCall(const absl::Status& status);
  TrialInfo MakeTrialInfo() const;
  TrainingPlan MakeTrainingPlan() const;
  std::optional<int> RestoreLatestCheckpoint();

  // The chief: asks the master for the next operation, hands it to the other
  // ranks and performs it, until an exit, a preemption or an error.
  int PerformOperations();
  // Each performs one operation; std::nullopt when it completed (the next
  // GetNextOperation acknowledges it), else the exit code.
  std::optional<int> Train(const tv1::Operation& op);
  std::optional<int> Validate(const tv1::Operation& op);
  std::optional<int> Checkpoint();
  int Exit(const tv1::Operation& op);
  // No operation yet: checkpoints and exits (with the other ranks) when
  // preempted, else waits a little. std::nullopt to ask again.
  std::optional<int> Wait();
  // A successful exit: the chief waits until the others are done with the
  // process group it hosts.
  int Finish();

  MasterClient& client_;
  const int rank_;
  tv1::GetTrialContextResponse tc_;
  ExperimentConfig config_;
  const DetTrialPlugin* plugin_ = nullptr;
  DistributedEnv denv_;
  std::unique_ptr<S3CheckpointStorage> s3_;  // null unless the run uses S3
  std::unique_ptr<Distributed> dist_;
  bool chief_ = true;
  MasterClient* reporting_client_ = nullptr;  // only the chief calls the master once the group formed
  std::optional<TrialContext> context_;
  std::unique_ptr<TrialHandle> handle_;
  std::optional<MasterReporter> reporter_;
  std::unique_ptr<PreemptionSource> preemption_;
  std::unique_ptr<TrialController> controller_;
};

int ManagedRank::Run(const std::string& trial_path, int threads) {
  if (auto rc = FetchContext(trial_path)) return *rc;
  if (auto rc = OpenS3()) return *rc;
  if (auto rc = JoinProcessGroup(threads)) return *rc;
  if (auto rc = BuildTrial()) return *rc;
  if (auto rc = RestoreLatestCheckpoint()) return *rc;
  if (!chief_) {
    int rc = RunRelayedOperations(*controller_, *dist_);
    return rc == 0 ? Finish() : rc;
  }
  return PerformOperations();
}

std::optional<int> ManagedRank::FetchContext(const std::string& trial_path) {
  tv1::GetTrialContextRequest ctx_req;
  ctx_req.set_rank(rank_);
  absl::Status st = client_.Call("GetTrialContext", &tv1::TrialService::Stub::GetTrialContext, ctx_req, &tc_);
  if (!st.ok()) return Fail(client_.lost() ? kExitMasterUnreachable : kExitTrialError, nullptr, st, false);

  auto config = ParseExperimentConfig(tc_.config_yaml(), "experiment config");
  if (!config.ok()) return Fail(kExitConfigError, &client_, config.status(), true);
  config_ = *std::move(config);
  // The config's debug: true raises this process's log level.
  if (config_.debug) {
    spdlog::set_level(spdlog::level::debug);
    spdlog::debug("[det-trial] debug logging on (config debug: true): allocation {}, rank {}", client_.allocation_id(),
                  rank_);
  }
  auto plugin = LoadTrialLibrary(trial_path);
  if (!plugin.ok()) return Fail(kExitLibraryError, &client_, plugin.status(), true);
  plugin_ = *plugin;
  return std::nullopt;
}

std::optional<int> ManagedRank::OpenS3() {
  auto storage = OpenS3Storage(&client_, tc_, rank_, /*chief=*/rank_ == 0);
  if (storage.ok()) {
    s3_ = *std::move(storage);
    return std::nullopt;
  }
  if (client_.lost()) return Fail(kExitMasterUnreachable, nullptr, storage.status(), false);
  // The master refused the storage (a profile not for this workspace): the
  // same every time, not retried.
  const bool refused = storage.status().code() == absl::StatusCode::kPermissionDenied;
  return Fail(refused ? kExitConfigError : kExitTrialError, &client_, storage.status(), refused);
}

// A distributed trial (DET_WORLD_SIZE > 1, set by det-agent from the
// master's rendezvous): every rank joins the process group before the trial
// is built, so that wrap_model hands every rank the chief's weights.
std::optional<int> ManagedRank::JoinProcessGroup(int threads) {
  auto denv = ReadDistributedEnv();
  if (!denv.ok()) return Fail(kExitConfigError, rank_ == 0 ? &client_ : nullptr, denv.status(), true);
  denv_ = *std::move(denv);
  if (denv_.distributed() && tc_.global_batch_size() % denv_.world_size != 0) {
    return Fail(kExitConfigError, rank_ == 0 ? &client_ : nullptr,
                absl::InvalidArgumentError(absl::StrCat("hyperparameters.global_batch_size ", tc_.global_batch_size(),
                                                        " is not divisible by the ", denv_.world_size,
                                                        " slots of this trial (resources.slots_per_trial)")),
                true);
  }
  // The ranks on one agent share its cores: by default each gets its share.
  if (threads <= 0 && denv_.local_size > 1 && Env("OMP_NUM_THREADS").empty()) {
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / denv_.local_size);
  }
  if (threads > 0) torch::set_num_threads(threads);
  torch::manual_seed(tc_.trial_seed());
  if (!denv_.distributed()) return std::nullopt;

  if (auto rc = Rendezvous()) return *rc;
  auto joined = Distributed::Join(denv_);
  if (!joined.ok()) return Fail(kExitTrialError, nullptr, joined.status(), false);
  dist_ = *std::move(joined);
  if (rank_ == 0) {
    std::printf("[det-trial] rank 0 of %d: process group over %s:%d formed (%d node(s))\n", denv_.world_size,
                denv_.chief_addr.c_str(), denv_.chief_port, denv_.num_nodes);
    std::fflush(stdout);
  }
  return std::nullopt;
}

// A rank that never started then fails the rendezvous with a message naming
// how many arrived, rather than a store timeout. A master without
// AllocationRendezvous is skipped (the store's own wait still applies).
std::optional<int> ManagedRank::Rendezvous() {
  tv1::AllocationRendezvousRequest rdv_req;
  rdv_req.set_rank(rank_);
  tv1::AllocationRendezvousResponse rdv_resp;
  // The master waits at most 60 s per call (DEADLINE_EXCEEDED): ask again
  // until our own timeout.
  const auto give_up = std::chrono::steady_clock::now() + denv_.timeout;
  absl::Status st;
  do {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    st = client_.Call("AllocationRendezvous", &tv1::TrialService::Stub::AllocationRendezvous, rdv_req, &rdv_resp,
                      std::max(left, std::chrono::milliseconds(1)), /*retry_deadline_exceeded=*/false);
  } while (st.code() == absl::StatusCode::kDeadlineExceeded && std::chrono::steady_clock::now() < give_up);
  if (!st.ok() && st.code() != absl::StatusCode::kUnimplemented) {
    return Fail(client_.lost() ? kExitMasterUnreachable : kExitTrialError, nullptr, st, false);
  }
  return std::nullopt;
}

TrialInfo ManagedRank::MakeTrialInfo() const {
  TrialInfo info;
  info.hparams = StructToJson(tc_.hparams());
  info.experiment_config = config_.raw;
  info.experiment_id = tc_.experiment_id();
  info.trial_id = tc_.trial_id();
  info.trial_seed = tc_.trial_seed();
  info.global_batch_size = tc_.global_batch_size();
  info.distributed = denv_.context();
  return info;
}

// The master sequences training, validation and checkpoints; the plan only
// sets how training metrics are grouped and where checkpoints go.
TrainingPlan ManagedRank::MakeTrainingPlan() const {
  TrainingPlan plan;
  // The master sends every length (TRAIN targets, a time_metric's target);
  // a time_metric's name makes training reports carry its last value.
  const SearcherLength length = ClusterSearcherLength(config_);
  if (length.is_metric()) plan.time_metric = length.unit;
  plan.records_per_epoch = config_.records_per_epoch;
  plan.scheduling_unit = config_.scheduling_unit;
  plan.searcher_metric = config_.searcher.metric;
  plan.checkpoint_dir = tc_.checkpoint_storage_path();
  if (s3::IsS3Url(plan.checkpoint_dir) && s3_ != nullptr) {
    // Saved to staging, uploaded, the local copy removed, then reported.
    plan.checkpoint_dir = s3_->save_dir();
    plan.publish_checkpoint = [s3 = s3_.get(), url = tc_.checkpoint_storage_path()](const SavedCheckpoint& local) {
      return s3->Upload(url, local);
    };
  }
  plan.checkpoint_metadata = {{"config_yaml", config_.yaml_text},
                              {"trial_class", plugin_->trial_class},
                              {"allocation_id", client_.allocation_id()}};
  plan.profiling = config_.profiling;
  return plan;
}

std::optional<int> ManagedRank::BuildTrial() {
  chief_ = !dist_ || dist_->is_chief();
  reporting_client_ = chief_ ? &client_ : nullptr;
  TrialInfo info = MakeTrialInfo();
  // The agent pins each rank to its GPU (CUDA_VISIBLE_DEVICES; empty for a
  // CPU slot), so "auto" is that GPU or the CPU.
  auto device = SelectDevice("auto", info.distributed);
  if (!device.ok()) return Fail(kExitConfigError, reporting_client_, device.status(), true);
  info.device = *device;
  context_.emplace(info);
  if (dist_) context_->set_gradient_reducer(dist_->MakeGradientReducer());

  std::printf("[det-trial] trial %lld (experiment %lld) %s, allocation %s, seed %u, hparams %s\n",
              static_cast<long long>(tc_.trial_id()), static_cast<long long>(tc_.experiment_id()),
              plugin_->trial_class, client_.allocation_id().c_str(), tc_.trial_seed(), info.hparams.dump().c_str());
  std::fflush(stdout);

  auto handle = TrialHandle::Create(plugin_, &*context_);
  if (!handle.ok()) return FailSetup(handle.status());
  handle_ = *std::move(handle);

  TrainingPlan plan = MakeTrainingPlan();
  reporter_.emplace(&client_, info.global_batch_size, chief_);
  // The chief asks the master whether to stop; the others follow its vote
  // (TrialController stops every rank at the same batch) or their SIGTERM.
  if (chief_) {
    preemption_ = std::make_unique<MasterPreemption>(&client_);
  } else {
    preemption_ = std::make_unique<SignalPreemption>();
  }
  auto controller =
      TrialController::Create(handle_.get(), &*context_, &*reporter_, preemption_.get(), plan, dist_.get());
  if (!controller.ok()) {
    if (IsTrialSetupError(controller.status())) return FailSetup(controller.status());
    return Fail(kExitTrialError, reporting_client_, controller.status(), false);
  }
  controller_ = *std::move(controller);
  return std::nullopt;
}

// The trial's constructor or a data loader builder threw (a missing data
// file, ...): exit kExitTrialSetupError, which the master retries once. Any
// rank reports it, naming itself in a distributed trial: the master keeps
// the first report of an allocation, and a peer of the failed rank only
// fails after it.
int ManagedRank::FailSetup(const absl::Status& status) {
  absl::Status named = status;
  if (denv_.distributed()) {
    named = absl::Status(status.code(), absl::StrCat("rank ", denv_.rank, ": ", status.message()));
  }
  return Fail(kExitTrialSetupError, &client_, named, /*deterministic=*/true);
}

std::optional<int> ManagedRank::RestoreLatestCheckpoint() {
  if (tc_.latest_checkpoint().uuid().empty()) {
    // A new trial of a warm-started experiment: the source's weights only.
    if (tc_.warm_start_checkpoint().uuid().empty()) return std::nullopt;
    // det-agent's copy (DET_WARM_START_DIR) when the source is another
    // user's checkpoint, which this trial's uid may not read.
    // An s3:// source is downloaded here, never staged by det-agent.
    const std::string staged = Env("DET_WARM_START_DIR");
    absl::StatusOr<std::string> local =
        staged.empty() ? LocalCheckpointDir(s3_.get(), tc_.warm_start_checkpoint().storage_path()) : staged;
    absl::Status st = local.ok() ? WarmStart(*local, *context_, chief_) : local.status();
    if (local.ok()) DiscardLocalCheckpoint(s3_.get(), *local);
    if (!st.ok()) return Fail(kExitTrialError, reporting_client_, st, false);
    return std::nullopt;
  }
  const std::string dir = tc_.latest_checkpoint().storage_path();
  // pbt: the parent's state, this trial's (explored) optimizer options.
  std::optional<OptimizerOptionsSnapshot> own_options;
  if (tc_.keep_optimizer_options()) own_options = OptimizerOptionsSnapshot::Capture(*context_);
  absl::StatusOr<std::string> local = LocalCheckpointDir(s3_.get(), dir);
  absl::Status st = local.ok() ? controller_->Restore(*local) : local.status();
  if (local.ok()) DiscardLocalCheckpoint(s3_.get(), *local);
  if (!st.ok()) return Fail(kExitTrialError, reporting_client_, st, false);
  if (own_options) {
    own_options->Apply(*context_);
    if (chief_) {
      std::printf("[det-trial] pbt: started from parent checkpoint %s with this trial's hparams\n", dir.c_str());
      std::fflush(stdout);
    }
  }
  if (chief_) {
    std::printf("[det-trial] resumed from checkpoint %s at batch %lld\n", dir.c_str(),
                static_cast<long long>(controller_->batches_trained()));
  }
  return std::nullopt;
}

int ManagedRank::PerformOperations() {
  int64_t completed_op = 0;
  while (true) {
    tv1::GetNextOperationRequest req;
    req.set_completed_op_id(completed_op);
    req.set_total_batches(controller_->batches_trained());
    req.set_timeout_ms(1000);
    // A searcher length in a training metric (e.g. tokens): its last value
    // (restored from the checkpoint on a resume) tells the master whether
    // the target is reached.
    const SearcherLength length = ClusterSearcherLength(config_);
    if (length.is_metric()) {
      std::optional<double> value = controller_->time_metric_value(length.unit);
      if (value && std::isfinite(*value)) req.set_time_metric_value(*value);
    }
    tv1::GetNextOperationResponse resp;
    absl::Status st = client_.Call("GetNextOperation", &tv1::TrialService::Stub::GetNextOperation, req, &resp,
                                   std::chrono::seconds(30));
    if (!st.ok()) return FailCall(st);
    const tv1::Operation& op = resp.operation();
    spdlog::debug("[det-trial] operation {}: {} (target {} batches, at {})", op.op_id(),
                  tv1::OperationKind_Name(op.kind()), op.target_total_batches(), controller_->batches_trained());
    // The chief hands each operation to the others before performing it.
    st = RelayOperation(dist_.get(), op);
    if (!st.ok()) return Fail(kExitTrialError, &client_, st, false);
    std::optional<int> ended;
    switch (op.kind()) {
      case tv1::OPERATION_KIND_TRAIN:
        ended = Train(op);
        break;
      case tv1::OPERATION_KIND_VALIDATE:
        ended = Validate(op);
        break;
      case tv1::OPERATION_KIND_CHECKPOINT:
        ended = Checkpoint();
        break;
      case tv1::OPERATION_KIND_EXIT:
        return Exit(op);
      case tv1::OPERATION_KIND_WAIT:
      default:
        if (auto waited = Wait()) return *waited;
        continue;  // nothing completed
    }
    if (ended) return *ended;
    completed_op = op.op_id();
  }
}

int ManagedRank::FailCall(const absl::Status& status) {
  const int code = client_.lost() ? kExitMasterUnreachable : kExitTrialError;
  return Fail(code, client_.QueueError().ok() ? nullptr : &client_, status, false);
}

std::optional<int> ManagedRank::Train(const tv1::Operation& op) {
  bool preempted = false;
  absl::Status st = op.time_metric().empty()
                        ? controller_->TrainTo(op.target_total_batches(), &preempted)
                        : controller_->TrainToMetric(op.time_metric(), op.time_metric_target(),
                                                     op.target_total_batches(), &preempted);
  if (!st.ok()) {
    // A time_metric the trial never reports fails the same way on a restart.
    const bool bad_config = st.code() == absl::StatusCode::kInvalidArgument;
    return Fail(bad_config ? kExitConfigError : kExitTrialError, &client_, st, bad_config);
  }
  if (!preempted) return std::nullopt;
  if (absl::Status q = client_.QueueError(); !q.ok()) return Fail(kExitTrialError, &client_, q, false);
  auto saved = controller_->Checkpoint();
  if (!saved.ok()) return Fail(kExitTrialError, &client_, saved.status(), false);
  controller_->FinishProfiling();  // this run's last profiler rows, before the exit's flush
  tv1::AckPreemptionRequest ack;
  tv1::AckPreemptionResponse ack_resp;
  (void)client_.Call("AckPreemption", &tv1::TrialService::Stub::AckPreemption, ack, &ack_resp);
  // The master's reason (EXIT_REASON_PAUSED, _PREEMPTED, _STOPPED), not
  // always a preemption.
  const std::string why = preemption_->Why();
  std::printf("[det-trial] asked to stop at batch %lld (%s)\n", static_cast<long long>(controller_->batches_trained()),
              why.empty() ? "no reason given" : why.c_str());
  std::fflush(stdout);
  return Finish();
}

std::optional<int> ManagedRank::Validate(const tv1::Operation& op) {
  auto metrics = controller_->Validate();
  if (!metrics.ok()) {
    const bool bad_config = metrics.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail(bad_config ? kExitConfigError : kExitTrialError, &client_, metrics.status(), bad_config);
  }
  tv1::CompleteSearcherOperationRequest done;
  done.set_op_id(op.op_id());
  done.set_searcher_metric(metrics->at(config_.searcher.metric));
  tv1::CompleteSearcherOperationResponse done_resp;
  absl::Status st = client_.Call("CompleteSearcherOperation", &tv1::TrialService::Stub::CompleteSearcherOperation,
                                 done, &done_resp);
  if (!st.ok()) return FailCall(st);
  return std::nullopt;
}

std::optional<int> ManagedRank::Checkpoint() {
  // A queued report failed: no checkpoint the master would never hear of.
  if (absl::Status q = client_.QueueError(); !q.ok()) return Fail(kExitTrialError, &client_, q, false);
  auto saved = controller_->Checkpoint();
  if (!saved.ok()) return Fail(kExitTrialError, &client_, saved.status(), false);
  return std::nullopt;
}

int ManagedRank::Exit(const tv1::Operation& op) {
  controller_->FinishProfiling();  // the last profiler rows, queued before the exit's flush
  std::printf("[det-trial] exiting at batch %lld (%s)\n", static_cast<long long>(controller_->batches_trained()),
              tv1::ExitReason_Name(op.exit_reason()).c_str());
  std::fflush(stdout);
  return Finish();
}

std::optional<int> ManagedRank::Wait() {
  if (preemption_->ShouldPreempt()) {
    absl::Status st = RelayPreemption(dist_.get());
    if (!st.ok()) return Fail(kExitTrialError, &client_, st, false);
    if (absl::Status q = client_.QueueError(); !q.ok()) return Fail(kExitTrialError, &client_, q, false);
    auto saved = controller_->Checkpoint();
    if (!saved.ok()) return Fail(kExitTrialError, &client_, saved.status(), false);
    controller_->FinishProfiling();
    return Finish();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return std::nullopt;
}

int ManagedRank::Finish() {
  if (!dist_) return 0;
  absl::Status done = dist_->Finish();
  if (!done.ok()) return Fail(kExitTrialError, nullptr, done, false);
  return 0;
}

}  // namespace

int RunManaged(const std::string& trial_path, int threads) {
  // First, before anything else may open a file: det-agent passes the token
  // on an inherited pipe (DET_ALLOCATION_TOKEN_FD), never in the environment.
  absl::StatusOr<std::string> token = ReadAllocationToken();
  if (!token.ok()) {
    std::fprintf(stderr, "det-trial: error: %s\n", std::string(token.status().message()).c_str());
    return kExitConfigError;
  }
  return RunManagedWithToken(trial_path, threads, *token);
}

int RunManagedWithToken(const std::string& trial_path, int threads, const std::string& token) {
  // The token is in this process's memory: no other process of its uid (a
  // second trial of the same user, anything the trial started) may ptrace
  // it or read its memory or fds through /proc.
  if (!MakeNonDumpable()) spdlog::warn("[det-trial] prctl(PR_SET_DUMPABLE, 0): {}", std::strerror(errno));
  TuneAllocator();
  InstallStopSignalHandlers();
  const std::string master = Env("DET_MASTER");
  const std::string allocation_id = Env("DET_ALLOCATION_ID");
  if (master.empty() || allocation_id.empty()) {
    std::fprintf(stderr, "det-trial: error: --managed needs DET_MASTER and DET_ALLOCATION_ID in the environment\n");
    return kExitConfigError;
  }
  const int rank = std::atoi(Env("DET_RANK", "0").c_str());
  // The agent passes the config's debug: true as DET_DEBUG=1.
  if (Env("DET_DEBUG") == "1") {
    spdlog::set_level(spdlog::level::debug);
    spdlog::debug("[det-trial] debug logging on (DET_DEBUG=1 from the agent): allocation {}, rank {}", allocation_id,
                  rank);
  }
  MasterClient client(master, allocation_id, token);
  ManagedRank run(&client, rank);
  const int rc = run.Run(trial_path, threads);
  // What the run reported, delivered before it exits (every path to a
  // successful end already flushed through a Call but a preemption's). A
  // failed run already waited its retry timeout for an unreachable master:
  // it does not wait again (one DET_MASTER_RETRY_TIMEOUT_S in all).
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = rc == 0 ? now + client.retry_timeout()
                        : client.lost() ? now
                                        : now + std::min<std::chrono::milliseconds>(client.retry_timeout(),
                                                                                     std::chrono::seconds(10));
  if (absl::Status st = DeliverQueuedReports(&client, deadline); rc == 0 && !st.ok()) {
    std::fprintf(stderr, "det-trial: error: %s\n", std::string(st.message()).c_str());
    return client.lost() ? kExitMasterUnreachable : kExitTrialError;
  }
  return rc;
}

}  // namespace det::runtime
