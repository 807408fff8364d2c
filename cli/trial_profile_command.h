// det-cli trial profile ID [--json]: where a profiled trial's time went
// (cli/trial_profile.h), from its `profiling` and `system` metric rows read
// with GetTrialMetrics (full resolution, page by page).
#ifndef DET_CLI_TRIAL_PROFILE_COMMAND_H_
#define DET_CLI_TRIAL_PROFILE_COMMAND_H_

#include <cstdint>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

// The most rows read per group: the master bounds the rows a trial keeps
// in each group (docs/guides/profiling.md); this is det-cli's own cap. A
// trial with more is summarised over its first kMaxProfileRows rows of that
// group, with a note on io.err.
constexpr int64_t kMaxProfileRows = 100000;

// Reads both groups (archived rows left out) and prints the summary table,
// or with io.json one JSON object. Returns 0; 1 with the master's error
// (NOT_FOUND for an unknown trial) or, when the trial has no `profiling`
// rows, "trial N has no profile: set profiling.enabled: true in the
// experiment config" on io.err. `page_size` 0: the master's page (10,000);
// `max_rows`: the cap per group (tests lower it).
int TrialProfileCommand(Client& client, int64_t trial_id, const CommandIo& io, int32_t page_size = 0,
                        int64_t max_rows = kMaxProfileRows);

}  // namespace det::cli

#endif  // DET_CLI_TRIAL_PROFILE_COMMAND_H_
