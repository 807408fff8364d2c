// One process's membership in a distributed trial (slots_per_trial > 1, or
// det-trial --local --nproc N): a c10d process group (Gloo on CPU) over a
// TCPStore that rank 0 (the chief) hosts at DET_CHIEF_ADDR:DET_CHIEF_PORT, and
// the few collectives the runtime builds on it: bucketed gradient averaging,
// the start-up broadcast of parameters, byte all-gather, an "any rank asked to
// stop" vote, and chief-to-all messages through the store.
//
// Every collective must be called by all ranks in the same order. A rank that
// fails exits; its peers' next collective fails within DET_DIST_TIMEOUT_S
// (default 60 s; a dead peer's closed connection is noticed at once), so no
// rank waits forever for a rank that is gone.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_DISTRIBUTED_H_
#define DET_TRIAL_RUNTIME_RUNTIME_DISTRIBUTED_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "det/context.h"

namespace det::runtime {

// Where this process stands, from the environment that det-agent (managed
// mode) or the local launcher (det-trial --local --nproc N) sets.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string chief_addr;  // host or IP of rank 0's TCPStore
  int chief_port = 0;
  // Limit of one collective and of joining the group (DET_DIST_TIMEOUT_S).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};

  bool distributed() const { return world_size > 1; }
  DistributedContext context() const {
    return DistributedContext(rank, world_size, local_rank, local_size, node_rank, num_nodes);
  }
};

// Reads DET_RANK, DET_LOCAL_RANK, DET_WORLD_SIZE, DET_LOCAL_SIZE,
// DET_NODE_RANK, DET_NUM_NODES, DET_CHIEF_ADDR, DET_CHIEF_PORT and
// DET_DIST_TIMEOUT_S. DET_WORLD_SIZE absent, empty or 1: a 1-rank env (the
// others are ignored). InvalidArgument naming the variable when a value is
// malformed or out of range, or the chief's address or port is missing.
absl::StatusOr<DistributedEnv> ReadDistributedEnv();

// The process group of a distributed trial. Not thread-safe: the training
// thread makes every call (the gradient reducer runs inside train_batch on
// that thread).
class Distributed {
 public:
  // Joins the group: rank 0 hosts the TCPStore, every rank connects and the
  // Gloo process group forms. Blocks until all env.world_size ranks have
  // joined or env.timeout passes (Unavailable, naming the chief's address).
  // Requires env.distributed().
  static absl::StatusOr<std::unique_ptr<Distributed>> Join(const DistributedEnv& env);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  const DistributedEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  bool is_chief() const { return env_.rank == 0; }

  // ---- Collectives. Errors are Unavailable (a peer failed, exited or
  // timed out) with the operation and the peers' error in the message.

  // Overwrites `tensors` (any dtypes/devices; dense) with rank 0's values,
  // in buckets of about bucket_bytes. Runs without autograd recording.
  absl::Status BroadcastFromChief(const std::vector<torch::Tensor>& tensors);
  // Replaces each parameter's gradient with its mean over the ranks,
  // flattening gradients into buckets of about bucket_bytes (one all-reduce
  // each, all in flight at once). A parameter without a gradient on some
  // ranks counts as zero there; one without a gradient on every rank keeps
  // none. Parameters with requires_grad() false are skipped. Every rank must
  // pass the same parameters in the same order. InvalidArgument for sparse
  // gradients.
  absl::Status AverageGradients(const std::vector<torch::Tensor>& params);
  // True when `value` is true on any rank.
  absl::StatusOr<bool> AnyTrue(bool value);
  // Every rank's `bytes`, indexed by rank.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& bytes);

  // ---- Chief-to-all messages through the store, for results of work the
  // chief does alone (a checkpoint, a full-dataset evaluation) and, in
  // managed mode, the master's operations. Publish (chief only) returns once
  // every other rank has received the message (or after the timeout);
  // Receive (other ranks only) waits up to a day for the next message, and
  // fails at once when the chief's process is gone. Messages are received in
  // the order published.
  absl::Status Publish(const std::string& bytes);
  absl::StatusOr<std::string> Receive();

  // Call on every rank before a successful exit: the chief waits (up to the
  // timeout) until every other rank has called it, so that its exit (which
  // takes the store down) cannot break a peer's last collective.
  absl::Status Finish();

  // A det::GradientReducer over this group for TrialContext (averages
  // gradients and broadcasts parameters; throws std::runtime_error on
  // failure, which the trial.so boundary turns into an error). Must not
  // outlive this object.
  std::shared_ptr<GradientReducer> MakeGradientReducer();

  // Bucket size of gradient averaging and broadcasts (default 25 MB).
  void set_bucket_bytes(int64_t bytes) { bucket_bytes_ = bytes; }

 private:
  struct Impl;
  explicit Distributed(DistributedEnv env);
  absl::Status Error(const std::string& what, const std::string& detail) const;

  DistributedEnv env_;
  std::unique_ptr<Impl> impl_;
  int64_t bucket_bytes_ = 25 << 20;
  int64_t publish_seq_ = 0;
  int64_t receive_seq_ = 0;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_DISTRIBUTED_H_
