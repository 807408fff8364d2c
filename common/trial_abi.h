// The trial.so plugin ABI version this build's det-trial accepts. Shared so
// the master can report it (GetMaster.trial_abi_version) without including
// trial runtime code; trial_runtime checks at compile time that it equals the
// SDK's DET_TRIAL_ABI_VERSION (trial_runtime/include/det/trial.h).
#ifndef DET_COMMON_TRIAL_ABI_H_
#define DET_COMMON_TRIAL_ABI_H_

#include <cstdint>

namespace det {

inline constexpr uint32_t kTrialAbiVersion = 1;

}  // namespace det

#endif  // DET_COMMON_TRIAL_ABI_H_
