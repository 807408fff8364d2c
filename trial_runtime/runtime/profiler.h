// The trial profiler (config section `profiling`, docs/guides/profiling.md):
// where the chief's (rank 0's) time goes, batch by batch, reported as rows of
// the metric groups `profiling` and `system`.
//
// Every instant of a profiling window is attributed to at most one phase:
// the innermost one running (phases nest: backward, the gradient all-reduce
// and the optimizer step run inside train_batch, whose own share is
// forward_s). The harness's own work is a phase timed like the others
// (runtime_s: reports, callbacks, LR schedulers, the preemption vote,
// progress, and the profiler's own report and system sample inside a
// window). An instant when no phase runs is unattributed_s, the one
// remainder: small when every phase is scoped right, so "the measured
// phases add up to wall_s" is a check that can fail.
//
// A window opens at the first profiled batch or phase of an operation and
// closes at the end of a batch once it is >= kProfileWindowSeconds old, or at
// the end of the operation (TrainTo, Validate, Checkpoint). Each closed
// window is one `profiling` row, its batch the total batches trained then;
// windows closing at the same batch (a training step, then a validation and
// a checkpoint there) add up into one row, since the master keeps one row per
// trial, group and batch; a row is reported when a later one starts or
// profiling ends. So at most about one row per second of training, and one
// per batch. `system` rows (process CPU and memory, GPUs through NVML) come
// when profiling starts, every kSystemPeriodSeconds at a window's close, and
// when it ends, at most one per batch.
//
// Pure bookkeeping over an injected clock, sampler and sink (no I/O of its
// own), so tests replay any sequence with a fake clock. Not thread-safe: the
// training thread makes every call.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_PROFILER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_PROFILER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/experiment_config.h"
#include "trial_runtime/sdk/phase_hook.h"

namespace det::runtime {

enum class ProfilePhase {
  kDataLoader,     // data_loader_s: waiting for the next training batch
  kForward,        // forward_s: train_batch, less the phases nested in it
  kBackward,       // backward_s: TrialContext::backward, less the all-reduce
  kAllReduce,      // allreduce_s: the distributed gradient average (0 on 1 rank)
  kOptimizerStep,  // optimizer_step_s: TrialContext::step_optimizer
  kCheckpoint,     // checkpoint_s: TrialController::Checkpoint
  kValidation,     // validation_s: TrialController::Validate
  kRuntime,        // runtime_s: the harness's own work (TrialController's scopes)
  kUnattributed,   // unattributed_s: in a window with no phase running (never entered)
};
inline constexpr int kProfilePhaseCount = 9;  // the 8 measured phases and unattributed_s

// The row key of `phase` ("data_loader_s", ...).
const char* ProfilePhaseKey(ProfilePhase phase);

inline constexpr double kProfileWindowSeconds = 1.0;
inline constexpr double kSystemPeriodSeconds = 5.0;
// Phases nested deeper than this (a trial calling backward inside backward)
// are not timed: their time stays with the phase around them.
inline constexpr int kMaxProfileDepth = 16;

// Monotonic seconds.
class ProfilerClock {
 public:
  virtual ~ProfilerClock() = default;
  virtual double Now() = 0;
};
// std::chrono::steady_clock; with `sync_cuda`, torch::cuda::synchronize()
// before each reading (config profiling.sync_timings on a CUDA device).
std::unique_ptr<ProfilerClock> MakeSteadyProfilerClock(bool sync_cuda);

// The figures of one `system` row, sampled when called.
class SystemSampler {
 public:
  virtual ~SystemSampler() = default;
  virtual std::map<std::string, double> Sample() = 0;
};

// Where rows go: group "profiling" or "system", the total batches trained.
using ProfileSink =
    std::function<void(const std::string& group, int64_t total_batches, const std::map<std::string, double>& row)>;

class Profiler final : public internal::PhaseHook {
 public:
  // Requires clock (and sampler, when not null) to outlive it. With
  // config.enabled false it never reads the clock and reports nothing.
  Profiler(const ProfilingConfig& config, ProfilerClock* clock, SystemSampler* sampler, ProfileSink sink);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Whether the current batch is profiled (the hot path's one branch).
  bool active() const { return active_; }

  // Before training batch `batch` (0-based total batches trained so far):
  // starts profiling at begin_on_batch, stops it after end_after_batch.
  // Reads no clock outside the profiled range.
  void BeforeBatch(int64_t batch);
  // After a batch of `samples` samples (all ranks): closes the window when
  // it is kProfileWindowSeconds old.
  void AfterBatch(int64_t samples);
  void Enter(ProfilePhase phase);
  void Exit(ProfilePhase phase);
  // The end of an operation at `total_batches`: closes the open window.
  void EndOperation(int64_t total_batches);
  // The end of the trial (or of this process's run): closes the window and
  // takes the last `system` row. Idempotent.
  void Finish(int64_t total_batches);

  // internal::PhaseHook: the SDK's backward, all-reduce and optimizer step.
  void Enter(internal::SdkPhase phase) noexcept override;
  void Exit(internal::SdkPhase phase) noexcept override;

  int64_t rows_reported() const { return rows_; }

 private:
  // Adds the time since the last stamp to the running phase; returns now.
  double Stamp();
  void OpenWindow(double now);
  // Ends the window at `now` into a row. With `reopen` (mid-operation) the
  // next window starts at `now` and the profiler's own report and system
  // sample are runtime_s in it; without, they fall between windows.
  void CloseWindow(double now, bool reopen = false);
  // Runs fn (the profiler's own report or sample) timed as runtime_s when a
  // window is open.
  template <typename F>
  void AsRuntime(F&& fn);
  void MaybeSampleSystem(double now, bool force);
  void FlushPending();
  void Stop();

  ProfilingConfig config_;
  ProfilerClock* clock_;
  SystemSampler* sampler_;
  ProfileSink sink_;
  bool active_ = false;
  bool done_ = false;  // past end_after_batch, or finished
  bool window_open_ = false;
  double window_start_ = 0;
  double last_stamp_ = 0;
  double last_system_ = -1;  // < 0: never sampled
  std::array<ProfilePhase, kMaxProfileDepth> stack_{};
  int depth_ = 0;
  int skipped_depth_ = 0;  // Enters beyond kMaxProfileDepth not yet exited
  std::array<double, kProfilePhaseCount> sums_{};
  int64_t batches_ = 0;
  int64_t samples_ = 0;
  int64_t total_batches_ = 0;
  int64_t rows_ = 0;
  // The last closed window's row, reported when a window closes at a later
  // batch or profiling stops (empty: none).
  std::map<std::string, double> pending_;
  int64_t pending_batches_ = -1;
  int64_t last_system_batches_ = -1;
};

// RAII Enter/Exit on a profiler that may be null (profiling off: nothing).
class ProfileScope {
 public:
  ProfileScope(Profiler* profiler, ProfilePhase phase)
      : profiler_(profiler != nullptr && profiler->active() ? profiler : nullptr), phase_(phase) {
    if (profiler_ != nullptr) profiler_->Enter(phase_);
  }
  ~ProfileScope() {
    if (profiler_ != nullptr) profiler_->Exit(phase_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profiler* profiler_;
  ProfilePhase phase_;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_PROFILER_H_
