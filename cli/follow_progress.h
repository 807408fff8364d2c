// What `experiment create --follow` (and `experiment wait`'s follower) prints
// for each trial: progress with throughput and time left, as Lightning and
// tqdm users expect.
//
//   FollowProgress progress(/*terminal=*/isatty(1));
//   progress.Observe(trial, absl::Now());   // every poll, for every trial
//   progress.Render(std::cout);             // after the poll
//
// On a terminal, Render keeps one line per trial and rewrites that block in
// place (ANSI cursor-up and erase-line); anything else printed to the same
// stream in between (state changes) must go through Note so the block stays
// below it. Piped, Render prints a plain line for each trial whose line
// changed since the last Render, and nothing else. Pure apart from the
// stream; not thread-safe; times come from the caller (tests pass their own).
#ifndef DET_CLI_FOLLOW_PROGRESS_H_
#define DET_CLI_FOLLOW_PROGRESS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "det/api/v1/api.pb.h"

namespace det::cli {

// Batches per second over a sliding window of samples (the last
// kWindow seconds), and the time left to `target`.
class ThroughputWindow {
 public:
  static constexpr absl::Duration kWindow = absl::Seconds(30);

  // A sample: `batches` trained at `now`. Fewer batches than the last sample
  // (the trial restarted from a checkpoint) starts the window afresh. A
  // repeated count (a poll between two progress reports) only moves the
  // time last seen.
  void Add(absl::Time now, int64_t batches);
  // Batches per second between the first and the latest change of count in
  // the window, so the rate holds steady between reports; once the count has
  // not moved for more than twice the mean time between reports (a stall),
  // up to the time last seen. nullopt until two counts span time.
  std::optional<double> Rate() const;
  // Time until `target` batches at Rate(); nullopt without a rate or target,
  // zero once reached.
  std::optional<absl::Duration> TimeLeft(int64_t target) const;

 private:
  std::deque<std::pair<absl::Time, int64_t>> samples_;  // changes of count
  absl::Time last_seen_ = absl::InfinitePast();
};

// "1:02:03", "4:05" (minutes:seconds under an hour); negative as "0:00".
std::string FormatEta(absl::Duration d);

// "Trial 1 ACTIVE: 400/938 batches (43%), 52.1 batches/s, ETA 0:10,
// validation loss=0.31": the progress line of one trial, with the rate and
// time left when `window` has them (and the trial is running).
std::string TrialProgressText(const det::api::v1::Trial& trial, const ThroughputWindow& window);

class FollowProgress {
 public:
  explicit FollowProgress(bool terminal) : terminal_(terminal) {}

  // Records the trial's state at `now`.
  void Observe(const det::api::v1::Trial& trial, absl::Time now);
  // Prints a line that is not a trial's progress (e.g. "Experiment 1
  // COMPLETED"): on a terminal, above the trial block.
  void Note(const std::string& line, std::ostream& out);
  // Prints the trials' lines (see the file comment).
  void Render(std::ostream& out);

 private:
  struct TrialView {
    ThroughputWindow window;
    std::string line;     // the current text
    std::string printed;  // what was last printed for it (piped)
  };
  void EraseBlock(std::ostream& out);

  bool terminal_;
  std::map<int64_t, TrialView> trials_;
  int block_lines_ = 0;  // lines of the block now on the terminal
};

}  // namespace det::cli

#endif  // DET_CLI_FOLLOW_PROGRESS_H_
