// det-cli trial metrics: a trial's metric reports as the master's chart
// view (downsampled), every report (--full, fetched page by page), or
// followed as they arrive (--follow, StreamTrialMetrics).
#ifndef DET_CLI_TRIAL_METRICS_COMMAND_H_
#define DET_CLI_TRIAL_METRICS_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"

namespace det::cli {

struct TrialMetricsArgs {
  std::string group;                      // "": every group
  std::vector<std::string> metric_names;  // --metric (repeatable); empty: all
  // Every report, unsampled: GetTrialMetrics with full_resolution, page
  // after page (each page at most `page_size` reports; 0: the master's
  // 10,000) until the cursor says there is no more.
  bool full = false;
  int32_t page_size = 0;
  // The stored reports, then new ones as they arrive until the trial ends.
  bool follow = false;
};

// The most reports `--full` gathers into one table (its memory); --json
// prints each page as it arrives and has no such bound.
constexpr int64_t kMaxFullTableReports = 200000;

// Without --full/--follow: one GetTrialMetrics call, the chart view (at
// most 1,000 points per metric); a note on io.err says when it left
// reports out. Table: one row per report, a column per metric name; with
// --json the response (default) or one report per line (--full, --follow).
// Returns 0, or 1 with the master's error (or the table bound) on io.err.
int TrialMetrics(Client& client, int64_t trial_id, const TrialMetricsArgs& args, const CommandIo& io);

}  // namespace det::cli

#endif  // DET_CLI_TRIAL_METRICS_COMMAND_H_
