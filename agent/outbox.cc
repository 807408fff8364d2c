// det::agent::Agent, part 3 of 3: the messages queued for the master
// (command results, process states, batched log lines, heartbeats). The
// Connect stream's writer (agent.cc) sends them in order.
#include <string>
#include <utility>

#include "agent/agent.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

namespace av1 = det::agent::v1;
namespace apiv1 = det::api::v1;

// Lines kept while the master is unreachable; older ones are dropped.
constexpr size_t kMaxBufferedLogLines = 100000;

void SetNow(google::protobuf::Timestamp* ts) {
  const int64_t nanos = absl::ToUnixNanos(absl::Now());
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

}  // namespace

void Agent::OnLine(const std::string& allocation_id, int rank, OutputStream stream,
                   std::string line) {
  spdlog::debug("[{} rank {} {}] {}", allocation_id, rank,
                stream == OutputStream::kStdout ? "out" : "err", line);
  apiv1::TaskLogLine log;
  log.set_allocation_id(allocation_id);
  log.set_agent_id(options_.agent_id);
  log.set_rank(rank);
  SetNow(log.mutable_timestamp());
  log.set_level(apiv1::LOG_LEVEL_UNSPECIFIED);
  log.set_stdtype(stream == OutputStream::kStdout ? apiv1::STD_TYPE_STDOUT
                                                  : apiv1::STD_TYPE_STDERR);
  log.set_source("runtime");
  log.set_message(Utf8Sanitized(line));  // a trial's bytes: UTF-8 before they enter the proto
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

void Agent::SendResult(int64_t seq, absl::Status status) {
  absl::MutexLock lock(&mu_);
  EnqueueResultLocked(seq, status.code(), std::string(status.message()));
}

void Agent::EnqueueResultLocked(int64_t seq, absl::StatusCode code, const std::string& message) {
  av1::AgentMessage msg;
  auto* r = msg.mutable_command_result();
  r->set_seq(seq);
  r->set_code(static_cast<int32_t>(code));
  r->set_message(Utf8Sanitized(message));
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
  ps->set_message(Utf8Sanitized(message));
  if (exit != nullptr) {
    if (exit->exit_code) ps->set_exit_code(*exit->exit_code);
    if (exit->signal_number) ps->set_signal_number(*exit->signal_number);
  }
  SetNow(ps->mutable_time());
  EnqueueLocked(std::move(msg));
}

void Agent::AgentLogLocked(const Allocation& alloc, const std::string& message) {
  apiv1::TaskLogLine log;
  log.set_trial_id(alloc.trial_id);
  log.set_task_id(alloc.task_id);
  log.set_allocation_id(alloc.id);
  log.set_agent_id(options_.agent_id);
  SetNow(log.mutable_timestamp());
  log.set_level(apiv1::LOG_LEVEL_ERROR);
  log.set_stdtype(apiv1::STD_TYPE_UNSPECIFIED);
  log.set_source("agent");
  log.set_message(Utf8Sanitized(message));
  if (log_buffer_.empty()) log_buffer_since_ = absl::Now();
  log_buffer_.push_back(std::move(log));
}

av1::AgentMessage Agent::HeartbeatLocked() {
  av1::AgentMessage msg;
  auto* hb = msg.mutable_heartbeat();
  SetNow(hb->mutable_time());
  for (auto& id : RunningIdsLocked()) hb->add_running_allocation_ids(id);
  return msg;
}

}  // namespace det::agent
