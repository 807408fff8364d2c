#include "master/core/trial_states.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;
namespace trialv1 = ::det::trial::v1;

bool Promotes(const ExperimentRuntime& exp) {
  const SearcherName name = exp.config.searcher.name;
  return name == SearcherName::kAdaptiveAsha || name == SearcherName::kAsyncHalving;
}

// "waiting for promotion" / "waiting for the other trials of its round"
// (pbt) / "waiting for the searcher".
std::string WaitingFor(const ExperimentRuntime& exp) {
  if (Promotes(exp)) return "waiting for promotion";
  if (exp.config.searcher.name == SearcherName::kPbt) return "waiting for the other trials of its round";
  return "waiting for the searcher";
}

// What a waiting trial does next, in words.
std::string WaitingDetail(const ExperimentRuntime& exp, const TrialRuntime& trial) {
  const std::string done = Promotes(exp) ? "its rung is done" : "its validation is done";
  const std::string resumed = Promotes(exp) ? "if promoted" : "when the searcher gives it more to train";
  return absl::StrCat(done, " at ", trial.row.total_batches, " batches and it is checkpointed; it holds no slot, ",
                      resumed, " it resumes from that checkpoint, and it ends COMPLETED if the search ends first");
}

}  // namespace

bool WaitsForSearcher(const TrialRuntime& trial) {
  return trial.row.state == kActive && trial.allocation_id.empty() && trial.searcher_target == 0 &&
         !trial.close_requested && !trial.killed && trial.row.total_batches > 0;
}

apiv1::State ShownState(const TrialRuntime& trial) {
  return WaitsForSearcher(trial) ? apiv1::STATE_WAITING : StateEnum(trial.row.state);
}

trialv1::ExitReason StopReason(const ExperimentRuntime& exp, const TrialRuntime& trial) {
  if (trial.killed || Stopping(exp.row.state) || Terminal(exp.row.state)) return trialv1::EXIT_REASON_STOPPED;
  if (trial.row.state == kPaused || exp.row.state == kPaused) return trialv1::EXIT_REASON_PAUSED;
  return trialv1::EXIT_REASON_PREEMPTED;
}

std::string StateReason(const ExperimentRuntime& exp, const TrialRuntime& trial, bool pending, int slots) {
  const std::string& state = trial.row.state;
  const int64_t batches = trial.row.total_batches;
  if (state == kCompleted) return absl::StrCat("completed at ", batches, " batches: the searcher is done with it");
  if (state == kCanceled) {
    return trial.killed ? absl::StrCat("canceled by the user at ", batches, " batches")
                        : absl::StrCat("canceled at ", batches, " batches");
  }
  if (state == kError) return absl::StrCat("error: ", trial.error_message);
  if (state == kPaused) {
    const std::string by = exp.row.state == kPaused ? absl::StrCat("experiment ", exp.row.id, " paused by the user")
                                                    : "paused by the user";
    return trial.allocation_id.empty()
               ? absl::StrCat(by, "; resumes from its latest checkpoint when activated")
               : absl::StrCat(by, "; checkpoints at its next batch, then exits");
  }
  if (WaitsForSearcher(trial)) return absl::StrCat(WaitingFor(exp), ": ", WaitingDetail(exp, trial));
  if (state != kActive) return "";
  if (!trial.allocation_id.empty()) {
    if (trial.killed) return "being canceled by the user";
    if (exp.row.state == kPaused) {
      return absl::StrCat("pausing: experiment ", exp.row.id, " paused by the user; checkpoints, then exits");
    }
    if (!trial.preemption.empty()) return trial.preemption;
    if (trial.searcher_target == 0 && !trial.close_requested && batches > 0) {
      return absl::StrCat(WaitingFor(exp), " after this run: checkpoints at ", batches, " batches, then gives its slot back");
    }
    return "";
  }
  if (!trial.preemption.empty()) return trial.preemption;
  if (pending) return absl::StrCat("queued for ", slots, " slot(s)");
  return "";
}

std::string WaitingLine(const ExperimentRuntime& exp, const TrialRuntime& trial) {
  return absl::StrCat("[det-master] trial ", trial.row.id, " is ", WaitingFor(exp), ": ", WaitingDetail(exp, trial));
}

std::string RunEndLine(const ExperimentRuntime& exp, const TrialRuntime& trial, const std::string& state_after,
                       trialv1::ExitReason reason) {
  const std::string head = absl::StrCat("[det-master] trial ", trial.row.id, " ");
  const int64_t batches = trial.row.total_batches;
  if (reason == trialv1::EXIT_REASON_COMPLETED) {
    return absl::StrCat(head, "completed at ", batches, " batches: the searcher is done with it");
  }
  if (reason == trialv1::EXIT_REASON_STOPPED) return absl::StrCat(head, "canceled by the user at ", batches, " batches");
  if (state_after == kPaused) {
    return absl::StrCat(head, "paused by the user at ", batches,
                        " batches; it resumes from its latest checkpoint when activated");
  }
  if (WaitsForSearcher(trial)) return WaitingLine(exp, trial);
  if (reason == trialv1::EXIT_REASON_PREEMPTED && !trial.preemption.empty()) {
    std::string why = trial.preemption;  // "preempted for ...: checkpoints, then waits ..."
    why.resize(std::min(why.size(), why.find(": checkpoints")));
    return absl::StrCat(head, "stopped at ", batches, " batches: ", why,
                        "; it resumes from its latest checkpoint when slots are free");
  }
  return "";
}

std::string CompletedWhileWaitingLine(const TrialRuntime& trial) {
  return absl::StrCat("[det-master] trial ", trial.row.id, " completed at ", trial.row.total_batches,
                      " batches: the search ended without promoting it further, so its latest checkpoint is its last");
}

}  // namespace det::master
