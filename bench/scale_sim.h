// The load generator behind bench/master_scale: simulated agents, trials and
// dashboard readers that speak the master's real gRPC protocols (no
// LibTorch, no processes).
//
//  - SimAgents registers N agents of S slots (det.agent.v1 RegisterAgent +
//    Connect) and hands every StartAllocation to the trial workers; an
//    allocation's end is reported as its process TERMINATED with exit 0.
//  - SimTrials runs each allocation through det.trial.v1 as det-trial does:
//    GetNextOperation, then TRAIN (training metrics, `rows_per_request` rows
//    a request, paced to `rows_per_second_per_trial` on a fixed schedule
//    that a slow reply does not stretch, as det-trial's report queue lets
//    training go on; at most 1 s behind, the rest counted as forgiven),
//    VALIDATE
//    (ReportValidationMetrics + CompleteSearcherOperation), CHECKPOINT
//    (ReportCheckpoint), EXIT. It counts every row the master acknowledged,
//    per (trial, group), to check later that none was lost or duplicated.
//    Each training row carries metric "sent_ms" (its send time) so that
//    stream readers can measure ingestion lag.
//  - Readers behave like open dashboards: experiment list, experiment,
//    trial table pages and downsampled trial metrics, timed per kind; metric
//    stream subscribers (StreamTrialMetrics, follow) measure ingestion lag.
//
// Thread-safe where noted; each class owns its threads and joins them in
// Stop() (or its destructor).
#ifndef DET_BENCH_SCALE_SIM_H_
#define DET_BENCH_SCALE_SIM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"

namespace det::bench {

int64_t NowMs();  // wall clock, ms since the epoch

// Latency samples (ms); thread-safe.
class Samples {
 public:
  void Add(double ms);
  size_t Count() const;
  // The q-quantile (0..1) of the samples so far; 0 when none.
  double Quantile(double q) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> v_;
};

struct StartedAllocation {
  std::string agent_id;
  std::string allocation_id;
  std::string token;
  int64_t trial_id = 0;
};

class SimAgents {
 public:
  // Registers `agents` agents named "<prefix>-<i>" of `slots` slots each and
  // opens their streams (one reader thread per agent).
  SimAgents(const std::string& grpc_address, int agents, int slots, const std::string& prefix);
  ~SimAgents();

  // The next allocation started on any agent, waiting up to `timeout_ms`;
  // false on timeout or after Stop(). Thread-safe.
  bool NextStart(StartedAllocation* out, int timeout_ms);
  // Reports the allocation's process as TERMINATED with `exit_code` on its
  // agent's stream. Thread-safe.
  void Terminated(const StartedAllocation& a, int exit_code);
  // Allocations the master asked to kill so far. Thread-safe.
  bool KillRequested(const std::string& allocation_id);
  int64_t starts() const { return starts_.load(); }
  void Stop();

 private:
  struct Agent {
    std::string id;
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReaderWriter<agent::v1::AgentMessage, agent::v1::MasterMessage>> stream;
    std::mutex write_mu;
    std::thread reader;
  };
  void Read(Agent* a);

  std::shared_ptr<grpc::Channel> channel_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::map<std::string, Agent*> by_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StartedAllocation> started_;
  std::map<std::string, bool> killed_;
  std::atomic<int64_t> starts_{0};
  std::atomic<bool> stop_{false};
};

struct TrialLoadOptions {
  int workers = 16;
  int rows_per_request = 10;
  double rows_per_second_per_trial = 10;
};

class SimTrials {
 public:
  // Starts `options.workers` threads that take allocations from `agents`.
  SimTrials(const std::string& grpc_address, SimAgents* agents, const TrialLoadOptions& options);
  ~SimTrials();

  // Stops reporting (calls in flight finish) and joins the workers.
  void Stop();
  // Rows acknowledged by the master so far. Thread-safe.
  int64_t acked_rows() const { return acked_rows_.load(); }
  int64_t errors() const { return errors_.load(); }
  int64_t running() const { return running_.load(); }
  int64_t validations() const { return validations_.load(); }
  int64_t checkpoints() const { return checkpoints_.load(); }
  // Training rows a run skipped because it fell more than 1 s behind its
  // schedule (offered, never sent). Thread-safe.
  int64_t forgiven_rows() const { return forgiven_rows_.load(); }
  // Per training request: how late it was sent against its run's schedule,
  // ms. A worker serves many runs one call at a time, so this is the
  // generator's queueing as much as the master's latency (a det-trial has
  // its own sender thread).
  Samples& schedule_slip() { return slip_; }
  // Every run starts its schedule afresh from now (what a ramp left behind
  // is forgiven, not counted), before a measurement window.
  void RestartSchedules() { ++schedule_epoch_; }
  // Acknowledged rows per (trial id, group). Call after Stop().
  std::map<std::pair<int64_t, std::string>, int64_t> AckedByTrial() const;
  std::string first_error() const;

 private:
  struct Run;
  void Work(int index);
  bool Step(Run* r);  // false: the run is over
  bool Call(const char* what, const std::string& token, const std::function<grpc::Status(grpc::ClientContext*)>& f);

  TrialLoadOptions options_;
  SimAgents* agents_;
  std::vector<std::unique_ptr<trial::v1::TrialService::Stub>> stubs_;  // one channel per worker
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> acked_rows_{0}, errors_{0}, running_{0}, validations_{0}, checkpoints_{0};
  std::atomic<int64_t> forgiven_rows_{0}, schedule_epoch_{0};
  Samples slip_;
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, std::string>, int64_t> acked_;
  std::string first_error_;
};

// Dashboard-like readers and metric stream subscribers.
class Readers {
 public:
  // `readers` threads poll, each a round (list, experiment, trial table
  // page, 4 trial charts) every `interval_ms` (a dashboard refreshes every
  // 2 s); `streams` subscribers follow the training metrics of up to 1000
  // of `trial_ids` each.
  Readers(const std::string& grpc_address, const std::string& token, std::vector<int64_t> experiment_ids,
          std::vector<int64_t> trial_ids, int readers, int streams, int interval_ms);
  ~Readers();
  void Stop();

  Samples experiments, experiment, trial_table, metrics, lag;
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> streamed_rows{0};
  std::atomic<int64_t> oversized_charts{0};  // downsampled answers over 1000 points per series

 private:
  void Read(int index);
  void Follow(int index, std::vector<int64_t> trials);

  const int64_t lag_since_ms_;
  int interval_ms_ = 0;  // rows sent earlier (a stream's backlog) are not lag
  std::string token_;
  std::vector<int64_t> experiment_ids_, trial_ids_;
  std::unique_ptr<api::v1::Determined::Stub> stub_;
  std::vector<std::thread> threads_;
  std::vector<std::unique_ptr<grpc::ClientContext>> stream_ctx_;
  std::mutex ctx_mu_;
  std::atomic<bool> stop_{false};
};

}  // namespace det::bench

#endif  // DET_BENCH_SCALE_SIM_H_
