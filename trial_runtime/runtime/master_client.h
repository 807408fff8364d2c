// det-trial --managed's link to the master's TrialService: every call names
// the allocation and carries its token. Reports (metrics, checkpoints) go
// through a bounded ReportQueue, so that training does not wait for the
// master (Post); calls that need the master's answer (the next operation, a
// searcher result, an early exit) are made at once, after every queued
// report is delivered, so the master sees everything in order (Call).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_MASTER_CLIENT_H_
#define DET_TRIAL_RUNTIME_RUNTIME_MASTER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "common/grpc_status.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "trial_runtime/runtime/report_queue.h"

namespace det::runtime {

// How long calls and reports keep retrying an unreachable master (it may be
// restarting, or a link be down) before the run gives up with
// kExitMasterUnreachable: DET_MASTER_RETRY_TIMEOUT_S, default 10 minutes
// (a value that is not a positive number means the default).
std::chrono::milliseconds MasterRetryTimeout();

// The credentials of a channel to the master: TLS with the CA file
// DET_MASTER_CERT_FILE names (det-agent --tls-ca passes its CA file down),
// else insecure.
std::shared_ptr<grpc::ChannelCredentials> MasterChannelCredentials();

// Thread-safe.
class MasterClient {
 public:
  using Stub = ::det::trial::v1::TrialService::Stub;
  using Clock = std::chrono::steady_clock;

  // Dials `address` (TLS with DET_MASTER_CERT_FILE's CA when set), with
  // keepalive and a reconnect backoff of at most 1 s.
  MasterClient(const std::string& address, std::string allocation_id, std::string token);

  const std::string& allocation_id() const { return allocation_id_; }

  // Delivers every queued report (unless `flush_first` is false: the call
  // may overtake them), then calls `method` with a deadline, retrying
  // UNAVAILABLE (and DEADLINE_EXCEEDED unless `retry_deadline_exceeded` is
  // false: a call whose deadline is the caller's own). The flush and the
  // retries share one MasterRetryTimeout(): a call never waits longer for
  // an unreachable master. Every call is safe to repeat. Returns the
  // queue's error when a queued report failed.
  template <typename Req, typename Resp, typename Method>
  absl::Status Call(const char* what, Method method, Req req, Resp* resp,
                    std::chrono::milliseconds deadline = std::chrono::seconds(30),
                    bool retry_deadline_exceeded = true, bool flush_first = true) {
    const auto give_up = Clock::now() + retry_timeout_;
    if (flush_first) {
      if (absl::Status queued = FlushReports(give_up); !queued.ok()) return queued;
    }
    req.set_allocation_id(allocation_id_);
    auto backoff = std::chrono::milliseconds(100);
    for (bool reported = false;;) {
      grpc::Status s = Once(method, req, resp, deadline);
      const bool transient = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             (retry_deadline_exceeded && s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
      if (s.ok()) return absl::OkStatus();
      if (!transient || Clock::now() >= give_up) return FromGrpcStatus(s, what);
      if (!reported) {
        std::fprintf(stderr, "[det-trial] master unreachable (%s); retrying %s\n", s.error_message().c_str(), what);
        reported = true;
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }

  // Queues a report: returns at once unless the queue is full (then it
  // waits). The queue sends it in order and retries it while the master is
  // unreachable; `filter` (when set) maps each try's outcome, e.g. to drop a
  // report the master refused (it runs on a queue's sender thread, possibly
  // beside another report's). Returns the error of an earlier report that
  // failed. Training metrics overlap (ReportQueue): the master keeps a
  // trial's largest batch count and its rows by batch, whatever the order
  // they arrive in; every other report goes alone, in order.
  template <typename Req, typename Resp, typename Method>
  absl::Status Post(const char* what, Method method, Req req, std::function<absl::Status(absl::Status)> filter = {}) {
    req.set_allocation_id(allocation_id_);
    const size_t bytes = req.ByteSizeLong();
    std::string name = what;  // a checkpoint's report is named with its uuid
    if constexpr (std::is_same_v<Req, ::det::trial::v1::ReportCheckpointRequest>) name += " " + req.uuid();
    constexpr bool overlap = std::is_same_v<Req, ::det::trial::v1::ReportTrainingMetricsRequest>;
    return reports_.Push(
        std::move(name), bytes,
        [this, what, method, req = std::move(req), filter = std::move(filter)] {
          Resp resp;
          absl::Status s = FromGrpcStatus(Once(method, req, &resp, std::chrono::seconds(30)), what);
          return filter ? filter(std::move(s)) : s;
        },
        overlap);
  }

  // Delivers every queued report; OK or the error that failed the queue.
  absl::Status FlushReports() { return reports_.Flush(); }
  // The same, giving up at `deadline`: then UNAVAILABLE naming the retry
  // timeout and how many reports are still queued.
  absl::Status FlushReports(Clock::time_point deadline);
  // The error that failed the queue (OK while none did): the failed
  // report's own error, which names it.
  absl::Status QueueError() const { return reports_.error(); }
  // The reports queued and not delivered yet (a checkpoint's with its uuid).
  std::vector<std::string> PendingReports() const { return reports_.Pending(); }
  std::chrono::milliseconds retry_timeout() const { return retry_timeout_; }

  // Records what a call's outcome says about the allocation: the master is
  // unreachable (until a call gets through again), or it no longer knows the
  // allocation (it gave up on it: for good).
  void Note(grpc::StatusCode code);
  // Whether the run lost its master or its allocation (not the trial's fault).
  bool lost() const { return unreachable_.load() || revoked_.load(); }
  bool revoked() const { return revoked_.load(); }

  Stub* stub() { return stub_.get(); }
  const std::string& token() const { return token_; }

 private:
  // One try, with the token and `deadline`; notes the outcome. Fails at
  // once (UNAVAILABLE) while the channel is not connected; the preemption
  // poll's waiting call makes it redial (common/master_channel.h).
  template <typename Req, typename Resp, typename Method>
  grpc::Status Once(Method method, const Req& req, Resp* resp, std::chrono::milliseconds deadline) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status s = ((*stub_).*method)(&ctx, req, resp);
    Note(s.error_code());
    return s;
  }

  std::unique_ptr<Stub> stub_;
  std::string allocation_id_;
  std::string token_;
  std::chrono::milliseconds retry_timeout_;
  std::atomic<bool> unreachable_{false};
  std::atomic<bool> revoked_{false};
  ReportQueue reports_;  // last: its sender threads use the members above
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_MASTER_CLIENT_H_
