// Linked into escape_trial.so with the synthetic trial: when the library is
// loaded with ESCAPE_SLEEP_SECONDS set, it starts `setsid sleep SECONDS` in
// the background, a daemon that leaves the trial's process group and
// session and outlives the shell that started it, as user code may
// (tests/security_test.cc, section 5: it must not outlive the trial).
#include <cstdlib>

namespace {

__attribute__((constructor)) void StartEscapingDaemon() {
  if (std::getenv("ESCAPE_SLEEP_SECONDS") == nullptr) return;
  if (std::system("setsid sleep \"$ESCAPE_SLEEP_SECONDS\" </dev/null >/dev/null 2>&1 &") != 0) std::abort();
}

}  // namespace
