// MasterPreemption against a fake TrialService on an OS-chosen port: the
// master's preemption reaches the run, and a run that ends cancels its long
// poll rather than waiting for the master to answer it (issue 50: up to a
// second of every trial's teardown went to that wait).
#include "trial_runtime/runtime/master_preemption.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "det/trial/v1/trial.grpc.pb.h"

namespace det::runtime {
namespace {

namespace tv1 = ::det::trial::v1;
using std::chrono::system_clock;

// Holds every ShouldPreempt until the caller cancels it (or, for the test's
// sake, 60 s pass), unless `preempt` is set: then answers it at once.
class FakeMaster final : public tv1::TrialService::Service {
 public:
  grpc::Status ShouldPreempt(grpc::ServerContext* ctx, const tv1::ShouldPreemptRequest* req,
                             tv1::ShouldPreemptResponse* resp) override {
    std::unique_lock<std::mutex> l(mu_);
    ++calls_;
    allocation_ = req->allocation_id();
    token_ = TokenOf(*ctx);
    cv_.notify_all();
    const auto give_up = system_clock::now() + std::chrono::seconds(60);
    while (!preempt_ && !ctx->IsCancelled() && system_clock::now() < give_up) {
      cv_.wait_for(l, std::chrono::milliseconds(5));
    }
    if (ctx->IsCancelled()) {
      // Cancelled by the client, or ended by its own deadline (5 s away when
      // the call began): the time left to the deadline tells which.
      left_at_cancel_ = ctx->deadline() - system_clock::now();
      ++cancelled_;
      cv_.notify_all();
      return grpc::Status::CANCELLED;
    }
    resp->set_preempt(preempt_);
    resp->set_reason(tv1::EXIT_REASON_PREEMPTED);
    return grpc::Status::OK;
  }
  // Waits (at most 30 s) until `n` calls arrived; false when they did not.
  bool AwaitCalls(int n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return calls_ >= n; });
  }
  bool AwaitCancelled() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return cancelled_ > 0; });
  }
  void Preempt() {
    std::lock_guard<std::mutex> l(mu_);
    preempt_ = true;
    cv_.notify_all();
  }
  std::chrono::system_clock::duration left_at_cancel() {
    std::lock_guard<std::mutex> l(mu_);
    return left_at_cancel_;
  }
  std::string allocation() {
    std::lock_guard<std::mutex> l(mu_);
    return allocation_;
  }
  std::string token() {
    std::lock_guard<std::mutex> l(mu_);
    return token_;
  }

 private:
  static std::string TokenOf(const grpc::ServerContext& ctx) {
    auto it = ctx.client_metadata().find("x-det-allocation-token");
    return it == ctx.client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0, cancelled_ = 0;
  bool preempt_ = false;
  std::string allocation_, token_;
  std::chrono::system_clock::duration left_at_cancel_{};
};

struct Served {
  Served() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&fake);
    server = builder.BuildAndStart();
  }
  ~Served() { server->Shutdown(system_clock::now()); }
  FakeMaster fake;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

TEST(MasterPreemptionTest, TheMastersPreemptionReachesTheRun) {
  Served served;
  ASSERT_NE(served.port, 0);
  MasterClient client("127.0.0.1:" + std::to_string(served.port), "alloc-1", "secret-token");
  MasterPreemption preemption(&client);
  ASSERT_TRUE(served.fake.AwaitCalls(1));
  EXPECT_EQ(served.fake.allocation(), "alloc-1");
  EXPECT_EQ(served.fake.token(), "secret-token");
  EXPECT_FALSE(preemption.ShouldPreempt());
  served.fake.Preempt();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!preemption.ShouldPreempt() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polls for the event, with a deadline
  }
  ASSERT_TRUE(preemption.ShouldPreempt());
  EXPECT_EQ(preemption.Why(), "EXIT_REASON_PREEMPTED");
}

// The run is over: destroying the source cancels the ShouldPreempt the master
// still holds, so the process exits without waiting for its answer.
TEST(MasterPreemptionTest, EndingTheRunCancelsTheLongPollInFlight) {
  Served served;
  ASSERT_NE(served.port, 0);
  MasterClient client("127.0.0.1:" + std::to_string(served.port), "alloc-1", "secret-token");
  auto preemption = std::make_unique<MasterPreemption>(&client);
  ASSERT_TRUE(served.fake.AwaitCalls(1));
  preemption.reset();
  ASSERT_TRUE(served.fake.AwaitCancelled());
  // The runtime's own deadline for the call is 5 s: a call cancelled by the
  // client ends with nearly all of it left; one the deadline ended, with none.
  EXPECT_GT(served.fake.left_at_cancel(), std::chrono::seconds(2))
      << "the long poll ran to its deadline: the run waited for the master's answer";
}

}  // namespace
}  // namespace det::runtime
