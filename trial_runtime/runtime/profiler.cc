#include "trial_runtime/runtime/profiler.h"

#include <torch/cuda.h>

#include <chrono>
#include <utility>

namespace det::runtime {
namespace {

class SteadyProfilerClock final : public ProfilerClock {
 public:
  explicit SteadyProfilerClock(bool sync_cuda) : sync_cuda_(sync_cuda) {}
  double Now() override {
    if (sync_cuda_) torch::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

 private:
  bool sync_cuda_;
};

ProfilePhase FromSdk(internal::SdkPhase phase) {
  switch (phase) {
    case internal::SdkPhase::kBackward:
      return ProfilePhase::kBackward;
    case internal::SdkPhase::kAllReduce:
      return ProfilePhase::kAllReduce;
    case internal::SdkPhase::kOptimizerStep:
      return ProfilePhase::kOptimizerStep;
  }
  return ProfilePhase::kBackward;
}

}  // namespace

const char* ProfilePhaseKey(ProfilePhase phase) {
  switch (phase) {
    case ProfilePhase::kDataLoader:
      return "data_loader_s";
    case ProfilePhase::kForward:
      return "forward_s";
    case ProfilePhase::kBackward:
      return "backward_s";
    case ProfilePhase::kAllReduce:
      return "allreduce_s";
    case ProfilePhase::kOptimizerStep:
      return "optimizer_step_s";
    case ProfilePhase::kCheckpoint:
      return "checkpoint_s";
    case ProfilePhase::kValidation:
      return "validation_s";
    case ProfilePhase::kRuntime:
      return "runtime_s";
    case ProfilePhase::kUnattributed:
      return "unattributed_s";
  }
  return "unattributed_s";
}

std::unique_ptr<ProfilerClock> MakeSteadyProfilerClock(bool sync_cuda) {
  return std::make_unique<SteadyProfilerClock>(sync_cuda);
}

Profiler::Profiler(const ProfilingConfig& config, ProfilerClock* clock, SystemSampler* sampler, ProfileSink sink)
    : config_(config), clock_(clock), sampler_(sampler), sink_(std::move(sink)) {
  done_ = !config_.enabled;  // config_.enabled false: never active
  // The SDK's phases reach this profiler only while it lives.
  if (config_.enabled) internal::SetPhaseHook(this);
}

Profiler::~Profiler() {
  if (internal::GetPhaseHook() == this) internal::SetPhaseHook(nullptr);
}

template <typename F>
void Profiler::AsRuntime(F&& fn) {
  const bool timed = window_open_ && depth_ < kMaxProfileDepth;
  if (timed) stack_[static_cast<size_t>(depth_++)] = ProfilePhase::kRuntime;
  fn();
  if (timed) {
    Stamp();
    --depth_;
  }
}

void Profiler::BeforeBatch(int64_t batch) {
  if (done_) return;
  // config_.begin_on_batch and config_.end_after_batch bound the profiled batches.
  const bool in_range = batch >= config_.begin_on_batch &&
                        (!config_.end_after_batch.has_value() || batch <= *config_.end_after_batch);
  if (!active_) {
    if (!in_range) return;
    active_ = true;
    total_batches_ = batch;
    const double now = clock_->Now();
    OpenWindow(now);
    AsRuntime([&] { MaybeSampleSystem(now, /*force=*/true); });
    return;
  }
  total_batches_ = batch;
  if (!in_range) {
    Stop();
    return;
  }
  if (!window_open_) OpenWindow(clock_->Now());
}

void Profiler::AfterBatch(int64_t samples) {
  if (!active_) return;
  ++batches_;
  samples_ += samples;
  ++total_batches_;
  const double now = Stamp();
  if (now - window_start_ >= kProfileWindowSeconds) CloseWindow(now, /*reopen=*/true);
}

void Profiler::Enter(ProfilePhase phase) {
  if (!active_ || phase == ProfilePhase::kUnattributed) return;
  if (depth_ >= kMaxProfileDepth) {
    ++skipped_depth_;
    return;
  }
  if (!window_open_) {
    OpenWindow(clock_->Now());
  } else {
    Stamp();
  }
  stack_[static_cast<size_t>(depth_++)] = phase;
}

void Profiler::Exit(ProfilePhase phase) {
  if (!active_) return;
  if (skipped_depth_ > 0) {
    --skipped_depth_;
    return;
  }
  if (depth_ == 0 || stack_[static_cast<size_t>(depth_ - 1)] != phase) return;  // unpaired: ignored
  Stamp();
  --depth_;
}

void Profiler::Enter(internal::SdkPhase phase) noexcept { Enter(FromSdk(phase)); }
void Profiler::Exit(internal::SdkPhase phase) noexcept { Exit(FromSdk(phase)); }

void Profiler::EndOperation(int64_t total_batches) {
  if (!active_) return;
  total_batches_ = total_batches;
  if (window_open_) CloseWindow(Stamp());
}

void Profiler::Finish(int64_t total_batches) {
  if (!active_) {
    done_ = true;
    return;
  }
  total_batches_ = total_batches;
  Stop();
}

double Profiler::Stamp() {
  const double now = clock_->Now();
  if (window_open_) {
    const ProfilePhase running = depth_ > 0 ? stack_[static_cast<size_t>(depth_ - 1)] : ProfilePhase::kUnattributed;
    sums_[static_cast<size_t>(running)] += now - last_stamp_;
  }
  last_stamp_ = now;
  return now;
}

void Profiler::OpenWindow(double now) {
  window_open_ = true;
  window_start_ = now;
  last_stamp_ = now;
}

void Profiler::CloseWindow(double now, bool reopen) {
  std::map<std::string, double> row;
  row["wall_s"] = now - window_start_;
  for (int i = 0; i < kProfilePhaseCount; ++i) {
    row[ProfilePhaseKey(static_cast<ProfilePhase>(i))] = sums_[static_cast<size_t>(i)];
  }
  row["batches"] = static_cast<double>(batches_);
  row["samples"] = static_cast<double>(samples_);
  sums_.fill(0);
  batches_ = 0;
  samples_ = 0;
  window_open_ = false;
  // One row per batch (the master keeps one per trial, group and batch):
  // windows ending at the same batch add up into one row.
  const bool merge = pending_batches_ == total_batches_ && !pending_.empty();
  if (reopen) OpenWindow(now);
  AsRuntime([&] {
    if (merge) {
      for (const auto& [key, value] : row) pending_[key] += value;
    } else {
      FlushPending();
      pending_ = std::move(row);
      pending_batches_ = total_batches_;
    }
    MaybeSampleSystem(now, /*force=*/false);
  });
}

void Profiler::FlushPending() {
  if (pending_.empty()) return;
  ++rows_;
  sink_("profiling", pending_batches_, pending_);
  pending_.clear();
}

void Profiler::MaybeSampleSystem(double now, bool force) {
  if (sampler_ == nullptr) return;
  if (!force && last_system_ >= 0 && now - last_system_ < kSystemPeriodSeconds) return;
  // One row per batch, as for profiling rows: a second at the same batch is dropped.
  if (last_system_batches_ == total_batches_) return;
  last_system_ = now;
  last_system_batches_ = total_batches_;
  sink_("system", total_batches_, sampler_->Sample());
}

void Profiler::Stop() {
  if (window_open_) CloseWindow(Stamp());
  FlushPending();
  MaybeSampleSystem(clock_->Now(), /*force=*/true);
  active_ = false;
  done_ = true;
  depth_ = 0;
  skipped_depth_ = 0;
}

}  // namespace det::runtime
