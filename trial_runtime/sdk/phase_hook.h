// Runtime-internal (not installed): how the trial profiler
// (trial_runtime/runtime/profiler.h) times the phases that run inside a
// trial's train_batch: TrialContext::backward, the gradient all-reduce it
// makes in a distributed trial, and TrialContext::step_optimizer. A
// process-wide hook rather than a TrialContext member, so that no public SDK
// class changes its layout (one trial per runtime process).
#ifndef DET_TRIAL_RUNTIME_SDK_PHASE_HOOK_H_
#define DET_TRIAL_RUNTIME_SDK_PHASE_HOOK_H_

namespace det::internal {

enum class SdkPhase { kBackward, kAllReduce, kOptimizerStep };

// Called on the training thread around each SDK phase. Enter and Exit pair
// up, also when the phase throws. Must not throw.
class PhaseHook {
 public:
  virtual ~PhaseHook() = default;
  virtual void Enter(SdkPhase phase) noexcept = 0;
  virtual void Exit(SdkPhase phase) noexcept = 0;
};

// Installs `hook` (null: none, the default). With none, each phase costs one
// relaxed atomic load and a branch, no clock read. `hook` must outlive its
// installation. Thread-safe.
void SetPhaseHook(PhaseHook* hook);
PhaseHook* GetPhaseHook();

// Enter on construction, Exit on destruction (null hook: nothing).
class PhaseScope {
 public:
  explicit PhaseScope(SdkPhase phase) : hook_(GetPhaseHook()), phase_(phase) {
    if (hook_ != nullptr) hook_->Enter(phase_);
  }
  ~PhaseScope() {
    if (hook_ != nullptr) hook_->Exit(phase_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseHook* hook_;
  SdkPhase phase_;
};

}  // namespace det::internal

#endif  // DET_TRIAL_RUNTIME_SDK_PHASE_HOOK_H_
