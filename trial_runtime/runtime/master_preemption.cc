#include "trial_runtime/runtime/master_preemption.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/exit_codes.h"

namespace det::runtime {
namespace tv1 = ::det::trial::v1;

absl::Status DeliverQueuedReports(MasterClient* client, std::chrono::steady_clock::time_point deadline) {
  deadline = std::min(deadline, std::chrono::steady_clock::now() + client->retry_timeout());
  absl::Status st = client->FlushReports(deadline);
  if (st.ok()) return st;
  const std::vector<std::string> pending = client->PendingReports();
  if (!pending.empty()) {
    std::fprintf(stderr, "det-trial: %zu reports not delivered to the master:", pending.size());
    for (size_t i = 0; i < pending.size() && i < 20; ++i) std::fprintf(stderr, " [%s]", pending[i].c_str());
    std::fprintf(stderr, "%s\n", pending.size() > 20 ? " ..." : "");
    for (const std::string& what : pending) {
      if (what.rfind("ReportCheckpoint ", 0) == 0) {
        std::fprintf(stderr, "det-trial: checkpoint %s is on disk but was not reported to the master\n",
                     what.c_str() + sizeof("ReportCheckpoint ") - 1);
      }
    }
  }
  std::fflush(stderr);
  return st;
}

MasterPreemption::MasterPreemption(MasterClient* client)
    : client_(client), parent_(getppid()), thread_([this] { Poll(); }) {}

MasterPreemption::~MasterPreemption() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    // The run is over: its long poll's answer no longer matters.
    if (in_flight_ != nullptr) in_flight_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

std::string MasterPreemption::Why() const {
  if (!preempt_.load(std::memory_order_acquire)) return StopRequested() ? "SIGTERM" : "";
  return tv1::ExitReason_Name(static_cast<tv1::ExitReason>(reason_.load(std::memory_order_relaxed)));
}

void MasterPreemption::Poll() {
  while (true) {
    tv1::ShouldPreemptRequest req;
    req.set_allocation_id(client_->allocation_id());
    req.set_timeout_ms(1000);
    tv1::ShouldPreemptResponse resp;
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", client_->token());
    // Waits for the channel to connect: a waiting call is what makes gRPC
    // redial the master promptly (common/master_channel.h).
    ctx.set_wait_for_ready(true);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      in_flight_ = &ctx;  // the destructor cancels it
    }
    grpc::Status s = client_->stub()->ShouldPreempt(&ctx, req, &resp);
    {
      std::lock_guard<std::mutex> l(mu_);
      in_flight_ = nullptr;
      if (stop_) return;  // cancelled by the destructor: says nothing about the master
    }
    if (s.ok() && resp.preempt()) {
      reason_.store(resp.reason(), std::memory_order_relaxed);
      preempt_.store(true, std::memory_order_release);
      return;
    }
    client_->Note(s.error_code());
    if (client_->revoked()) Abandon("the master no longer knows allocation " + client_->allocation_id());
    if (getppid() != parent_) {
      // The master may not know yet and still accept what is queued (a
      // checkpoint whose files are on disk): delivered within a short bound.
      (void)DeliverQueuedReports(client_, std::chrono::steady_clock::now() + kFlushBeforeAbandon);
      Abandon("the agent that started this process is gone");
    }
    std::unique_lock<std::mutex> l(mu_);
    // After an error wait a little before asking again; a successful long
    // poll already waited on the master.
    cv_.wait_for(l, s.ok() ? std::chrono::milliseconds(10) : std::chrono::milliseconds(500), [&] { return stop_; });
  }
}

void MasterPreemption::Abandon(const std::string& why) {
  std::fflush(stdout);
  std::fprintf(stderr, "det-trial: %s; exiting\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(kExitMasterUnreachable);
}

}  // namespace det::runtime
