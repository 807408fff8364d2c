// PollingStreamReactor: a gRPC server-streaming reactor over a cursor whose
// Next() returns StreamStep<Resp> (master/service/stream_cursors.h): one
// batch in flight at a time; while the cursor waits (following), and after
// a batch that caught up with it, it polls again after 200 ms on an Alarm,
// so no thread waits and a stream that keeps up reads at most 5 times a
// second.
#ifndef DET_MASTER_SERVICE_POLLING_STREAM_H_
#define DET_MASTER_SERVICE_POLLING_STREAM_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/grpc_status.h"
#include "master/service/stream_cursors.h"

namespace det::master {

template <typename Resp>
class PollingStreamReactor final : public grpc::ServerWriteReactor<Resp> {
 public:
  using NextFn = std::function<absl::StatusOr<StreamStep<Resp>>()>;
  // `hold` lives as long as the reactor (e.g. a MetricStreamLease).
  PollingStreamReactor(grpc::CallbackServerContext* ctx, NextFn next, std::shared_ptr<void> hold = nullptr)
      : ctx_(ctx), next_(std::move(next)), hold_(std::move(hold)) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return this->Finish(grpc::Status::OK);  // the client went away
    if (caught_up_) return WaitThenNext();
    Next();
  }
  void OnCancel() override {
    bool armed;
    {
      std::lock_guard<std::mutex> l(mu_);
      cancelled_ = true;
      armed = alarm_used_;
    }
    if (armed) alarm_.Cancel();  // outside mu_: the callback may run inline
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (ctx_->IsCancelled()) return this->Finish(grpc::Status::CANCELLED);
    auto step = next_();
    if (!step.ok()) return this->Finish(::det::ToGrpcStatus(step.status()));
    if (step->has_batch) {
      batch_ = std::move(step->batch);
      caught_up_ = step->caught_up;
      if (step->done) return this->StartWriteAndFinish(&batch_, grpc::WriteOptions(), grpc::Status::OK);
      return this->StartWrite(&batch_);
    }
    if (step->done) return this->Finish(grpc::Status::OK);
    WaitThenNext();
  }

  void WaitThenNext() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!cancelled_) {
        alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(200), [this](bool) { Next(); });
        alarm_used_ = true;
        return;
      }
    }
    this->Finish(grpc::Status::CANCELLED);
  }

  grpc::CallbackServerContext* const ctx_;
  NextFn next_;
  std::shared_ptr<void> hold_;
  Resp batch_;
  bool caught_up_ = false;  // batch_ held all there was
  grpc::Alarm alarm_;
  std::mutex mu_;
  bool cancelled_ = false;   // guarded by mu_
  bool alarm_used_ = false;  // guarded by mu_
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_POLLING_STREAM_H_
