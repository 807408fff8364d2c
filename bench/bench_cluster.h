// bench/bench_cluster: a det-master and one-slot det-agents on loopback for
// the benches that train through a real cluster (search_efficiency,
// search_table_record), and the API calls they share.
//
//   det::testing::TempDir dir;
//   det::bench::BenchCluster cluster(dir, /*agents=*/2, /*prestart_pool=*/0);
//   int64_t id = det::bench::CreateExperiment(cluster.api(), trial_so, yaml);
//   v1::Experiment e = det::bench::WaitForEnd(cluster.api(), id, std::chrono::hours(2));
//
// Everything here is for benchmarks: a failure prints its cause and exits 1.
#ifndef DET_BENCH_BENCH_CLUSTER_H_
#define DET_BENCH_BENCH_CLUSTER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "det/api/v1/api.grpc.pb.h"
#include "tests/test_util.h"

namespace det::bench {

// Adds the bearer token of the cluster's `determined` login to `ctx`. Valid
// once a BenchCluster has started (its first api() call).
void Authorize(grpc::ClientContext* ctx);

// A det-master and `agents` one-slot det-agents (with `--prestart-pool N`
// when N > 0), in directories under `dir`, started on the first api() call
// and stopped (SIGTERM) by the destructor. `dir` must outlive the cluster.
class BenchCluster {
 public:
  BenchCluster(const det::testing::TempDir& dir, int agents, int prestart_pool);
  ~BenchCluster();
  BenchCluster(const BenchCluster&) = delete;
  BenchCluster& operator=(const BenchCluster&) = delete;

  // The API, logged in as `determined`, once every agent is connected.
  det::api::v1::Determined::Stub& api();

 private:
  void Start();

  const det::testing::TempDir& dir_;
  const int agents_;
  const int prestart_pool_;
  std::unique_ptr<det::testing::Subprocess> master_;
  std::vector<std::unique_ptr<det::testing::Subprocess>> agent_procs_;
  std::unique_ptr<det::api::v1::Determined::Stub> api_;
};

// Creates and activates an experiment from `config_yaml` with the trial
// library at `trial_so`; its id.
int64_t CreateExperiment(det::api::v1::Determined::Stub& api, const std::string& trial_so,
                         const std::string& config_yaml);

// Polls experiment `id` until it is COMPLETED, ERROR or CANCELED (then
// returns it) or `timeout` passes (then exits 1). `on_poll`, when given, sees
// the experiment at each poll (e.g. to kill it early).
det::api::v1::Experiment WaitForEnd(det::api::v1::Determined::Stub& api, int64_t id,
                                    std::chrono::milliseconds timeout,
                                    const std::function<void(const det::api::v1::Experiment&)>& on_poll = {});

// The trials of experiment `id` (at most 1,000). Exits 1 (after a message)
// when the call fails.
det::api::v1::GetExperimentTrialsResponse ExperimentTrials(det::api::v1::Determined::Stub& api, int64_t id);

// Every metric report of trial `trial_id`. Exits 1 (after a message) when the
// call fails.
det::api::v1::GetTrialMetricsResponse TrialMetrics(det::api::v1::Determined::Stub& api, int64_t trial_id);

}  // namespace det::bench

#endif  // DET_BENCH_BENCH_CLUSTER_H_
