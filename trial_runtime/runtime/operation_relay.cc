#include "trial_runtime/runtime/operation_relay.h"

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "trial_runtime/runtime/process_setup.h"

namespace det::runtime {
namespace {

namespace tv1 = ::det::trial::v1;

constexpr char kTrain[] = "train";
constexpr char kValidate[] = "validate";
constexpr char kCheckpoint[] = "checkpoint";
constexpr char kExit[] = "exit";
constexpr char kPreempt[] = "preempt";

absl::Status Send(Distributed* dist, const char* kind, int64_t target) {
  if (dist == nullptr || dist->size() <= 1) return absl::OkStatus();
  return dist->Publish(nlohmann::json{{"kind", kind}, {"target", target}}.dump());
}

int Error(const Distributed& dist, int code, const absl::Status& status) {
  std::fprintf(stderr, "det-trial: error: rank %d: %s\n", dist.rank(), std::string(status.message()).c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  return code;
}

}  // namespace

absl::Status RelayOperation(Distributed* dist, const tv1::Operation& op) {
  switch (op.kind()) {
    case tv1::OPERATION_KIND_TRAIN:
      if (dist == nullptr || dist->size() <= 1) return absl::OkStatus();
      return dist->Publish(nlohmann::json{{"kind", kTrain},
                                          {"target", op.target_total_batches()},
                                          {"time_metric", op.time_metric()},
                                          {"time_metric_target", op.time_metric_target()}}
                               .dump());
    case tv1::OPERATION_KIND_VALIDATE:
      return Send(dist, kValidate, 0);
    case tv1::OPERATION_KIND_CHECKPOINT:
      return Send(dist, kCheckpoint, 0);
    case tv1::OPERATION_KIND_EXIT:
      return Send(dist, kExit, 0);
    default:
      return absl::OkStatus();
  }
}

absl::Status RelayPreemption(Distributed* dist) { return Send(dist, kPreempt, 0); }

int RunRelayedOperations(TrialController& c, Distributed& dist) {
  while (true) {
    auto bytes = dist.Receive();
    if (!bytes.ok()) return Error(dist, kExitTrialError, bytes.status());
    nlohmann::json op = nlohmann::json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
    if (!op.is_object() || !op.contains("kind") || !op["kind"].is_string()) {
      return Error(dist, kExitTrialError, absl::InternalError(absl::StrCat("malformed operation from the chief: ", *bytes)));
    }
    const std::string kind = op["kind"].get<std::string>();
    if (kind == kTrain) {
      bool preempted = false;
      const std::string metric = op.value("time_metric", std::string());
      absl::Status st = metric.empty() ? c.TrainTo(op.value("target", int64_t{0}), &preempted)
                                       : c.TrainToMetric(metric, op.value("time_metric_target", 0.0),
                                                         op.value("target", int64_t{0}), &preempted);
      if (!st.ok()) {
        return Error(dist, st.code() == absl::StatusCode::kInvalidArgument ? kExitConfigError : kExitTrialError, st);
      }
      if (preempted) {
        // Every rank agreed to stop at this batch; the chief checkpoints.
        auto saved = c.Checkpoint();
        if (!saved.ok()) return Error(dist, kExitTrialError, saved.status());
        // The chief's line names the master's reason (pause, preemption, ...).
        std::printf("[det-trial] rank %d asked to stop at batch %lld\n", dist.rank(),
                    static_cast<long long>(c.batches_trained()));
        std::fflush(stdout);
        return 0;
      }
    } else if (kind == kValidate) {
      auto metrics = c.Validate();
      if (!metrics.ok()) {
        return Error(dist, metrics.status().code() == absl::StatusCode::kInvalidArgument ? kExitConfigError : kExitTrialError,
                     metrics.status());
      }
    } else if (kind == kCheckpoint || kind == kPreempt) {
      auto saved = c.Checkpoint();
      if (!saved.ok()) return Error(dist, kExitTrialError, saved.status());
      if (kind == kPreempt) return 0;
    } else if (kind == kExit) {
      std::printf("[det-trial] rank %d exiting at batch %lld\n", dist.rank(),
                  static_cast<long long>(c.batches_trained()));
      std::fflush(stdout);
      return 0;
    } else {
      return Error(dist, kExitTrialError, absl::InternalError(absl::StrCat("unknown operation '", kind, "' from the chief")));
    }
  }
}

}  // namespace det::runtime
