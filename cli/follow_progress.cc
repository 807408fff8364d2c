#include "cli/follow_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/terminal_text.h"

namespace det::cli {

namespace v1 = det::api::v1;

void ThroughputWindow::Add(absl::Time now, int64_t batches) {
  if (!samples_.empty() && batches < samples_.back().second) samples_.clear();
  last_seen_ = now;
  if (!samples_.empty() && batches == samples_.back().second) return;
  samples_.emplace_back(now, batches);
  while (samples_.size() > 2 && now - samples_[1].first >= kWindow) samples_.pop_front();
}

std::optional<double> ThroughputWindow::Rate() const {
  if (samples_.size() < 2) return std::nullopt;
  const auto& [t0, b0] = samples_.front();
  const auto& [t1, b1] = samples_.back();
  const absl::Duration mean_gap = (t1 - t0) / static_cast<int64_t>(samples_.size() - 1);
  const absl::Time end = last_seen_ - t1 > 2 * mean_gap ? last_seen_ : t1;
  const double seconds = absl::ToDoubleSeconds(end - t0);
  if (seconds <= 0 || b1 <= b0) return std::nullopt;
  return static_cast<double>(b1 - b0) / seconds;
}

std::optional<absl::Duration> ThroughputWindow::TimeLeft(int64_t target) const {
  if (target <= 0 || samples_.empty()) return std::nullopt;
  const int64_t left = target - samples_.back().second;
  if (left <= 0) return absl::ZeroDuration();
  std::optional<double> rate = Rate();
  if (!rate) return std::nullopt;
  return absl::Seconds(std::ceil(static_cast<double>(left) / *rate));
}

std::string FormatEta(absl::Duration d) {
  int64_t s = d < absl::ZeroDuration() ? 0 : absl::ToInt64Seconds(d);
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

std::string TrialProgressText(const v1::Trial& tr, const ThroughputWindow& window) {
  const int64_t done = tr.total_batches_processed(), target = tr.searcher_target_batches();
  std::string line = absl::StrCat("Trial ", tr.id(), " ", StateLabel(tr.state()), ": ", done);
  if (target > 0) absl::StrAppend(&line, "/", target);
  absl::StrAppend(&line, " batches");
  if (target > 0) absl::StrAppend(&line, " (", std::min<int64_t>(100, done * 100 / target), "%)");
  const bool running = tr.state() == v1::STATE_ACTIVE && !tr.allocation_id().empty();
  std::optional<double> rate = window.Rate();
  if (running && rate) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", *rate);
    absl::StrAppend(&line, ", ", buf, " batches/s");
    if (std::optional<absl::Duration> left = window.TimeLeft(target)) {
      absl::StrAppend(&line, ", ETA ", FormatEta(*left));
    }
  }
  if (tr.has_latest_validation()) {
    absl::StrAppend(&line, ", validation ", FormatMetrics(tr.latest_validation().metrics()));
  }
  if (!tr.error_message().empty()) absl::StrAppend(&line, ", ", TerminalText(tr.error_message()));
  return line;
}

void FollowProgress::Observe(const v1::Trial& trial, absl::Time now) {
  TrialView& view = trials_[trial.id()];
  view.window.Add(now, trial.total_batches_processed());
  view.line = TrialProgressText(trial, view.window);
}

void FollowProgress::EraseBlock(std::ostream& out) {
  if (block_lines_ == 0) return;
  // Up one line and erase it, once per line of the block.
  for (; block_lines_ > 0; --block_lines_) out << "\x1b[1A\x1b[2K";
  out << '\r';
}

void FollowProgress::Note(const std::string& line, std::ostream& out) {
  if (terminal_) EraseBlock(out);
  out << line << '\n';
}

void FollowProgress::Render(std::ostream& out) {
  if (!terminal_) {
    for (auto& [id, view] : trials_) {
      if (view.line != view.printed) out << view.line << '\n';
      view.printed = view.line;
    }
    out.flush();
    return;
  }
  EraseBlock(out);
  for (auto& [id, view] : trials_) {
    out << view.line << '\n';
    view.printed = view.line;
    ++block_lines_;
  }
  out.flush();
}

}  // namespace det::cli
