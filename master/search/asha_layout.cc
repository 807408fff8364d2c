// The bracket arithmetic of successive halving: how many rungs, how long
// each is, and how trials and concurrency split over brackets (asha.h).
#include "master/search/asha.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace det {
namespace master {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Whether `d` is an integer that int64 arithmetic can use exactly.
bool IntegralDivisor(double d) { return d == std::floor(d) && d >= 2 && d < 4e18; }

}  // namespace

int64_t AshaFloorDivPow(int64_t n, double d, int64_t e) {
  if (IntegralDivisor(d)) {
    int64_t di = static_cast<int64_t>(d);
    for (int64_t i = 0; i < e && n > 0; ++i) n /= di;  // floor(floor(n/a)/b) == floor(n/(ab))
    return n;
  }
  double p = std::pow(d, static_cast<double>(e));
  if (!std::isfinite(p) || p > static_cast<double>(n)) return 0;
  double q = std::floor(static_cast<double>(n) / p);
  while (q > 0 && q * p > static_cast<double>(n)) q -= 1;
  while ((q + 1) * p <= static_cast<double>(n)) q += 1;
  return static_cast<int64_t>(q);
}

bool operator==(const AshaBracket& a, const AshaBracket& b) {
  return a.num_rungs == b.num_rungs && a.rung_lengths == b.rung_lengths && a.max_trials == b.max_trials &&
         a.max_concurrent_trials == b.max_concurrent_trials;
}

int64_t AshaRungsFor(double divisor, int64_t x) {
  int64_t k = 0;
  double p = 1;
  while (k < 64 && p * divisor <= static_cast<double>(x)) {
    p *= divisor;
    ++k;
  }
  return k + 1;
}

int64_t AshaMaxRungs(int64_t max_rungs, double divisor, int64_t max_length, int64_t max_trials) {
  int64_t r = std::min({max_rungs, AshaRungsFor(divisor, max_length), AshaRungsFor(divisor, max_trials)});
  return std::max<int64_t>(r, 1);
}

std::vector<int64_t> AshaModeBrackets(AshaMode mode, int64_t max_rungs) {
  std::vector<int64_t> out;
  max_rungs = std::max<int64_t>(max_rungs, 1);
  switch (mode) {
    case AshaMode::kAggressive:
      out.push_back(max_rungs);
      break;
    case AshaMode::kStandard:
      for (int64_t r = max_rungs; r >= (max_rungs - 1) / 2 + 1; --r) out.push_back(r);
      break;
    case AshaMode::kConservative:
      for (int64_t r = max_rungs; r >= 1; --r) out.push_back(r);
      break;
  }
  return out;
}

std::vector<int64_t> AshaRungLengths(int64_t num_rungs, double divisor, int64_t max_length) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < num_rungs; ++i) {
    out.push_back(std::max<int64_t>(1, AshaFloorDivPow(max_length, divisor, num_rungs - 1 - i)));
  }
  return out;
}

std::vector<int64_t> AshaBracketTrials(int64_t max_trials, double divisor, const std::vector<int64_t>& bracket_rungs) {
  size_t n = bracket_rungs.size();
  std::vector<int64_t> out(n, 0);
  if (n == 0 || max_trials <= 0) return out;
  if (max_trials < static_cast<int64_t>(n)) {
    for (int64_t i = 0; i < max_trials; ++i) out[static_cast<size_t>(i)] = 1;
    return out;
  }
  std::vector<double> weight(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    weight[i] = std::pow(divisor, static_cast<double>(bracket_rungs[i] - 1)) / static_cast<double>(bracket_rungs[i]);
    total += weight[i];
  }
  int64_t allocated = 0;
  for (size_t i = 0; i < n; ++i) {
    double share = std::isfinite(total) && total > 0 ? static_cast<double>(max_trials) * (weight[i] / total) : 0;
    // A hair of tolerance so that a share that is an integer in exact
    // arithmetic is not floored to one less.
    int64_t floor_share = static_cast<int64_t>(std::floor(share * (1 + 1e-12)));
    out[i] = std::max<int64_t>(1, std::min(floor_share, max_trials));
    allocated += out[i];
  }
  if (allocated < max_trials) out[0] += max_trials - allocated;
  while (allocated > max_trials) {
    size_t most = static_cast<size_t>(std::max_element(out.begin(), out.end()) - out.begin());
    if (out[most] <= 1) break;
    --out[most];
    --allocated;
  }
  return out;
}

std::vector<int64_t> AshaBracketConcurrency(int64_t max_concurrent_trials, double divisor,
                                            const std::vector<int64_t>& bracket_trials) {
  size_t n = bracket_trials.size();
  std::vector<int64_t> out(n, 0);
  if (n == 0) return out;
  if (max_concurrent_trials > 0) {
    int64_t c = std::max<int64_t>(max_concurrent_trials, static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      out[i] = c / static_cast<int64_t>(n) + (static_cast<int64_t>(i) < c % static_cast<int64_t>(n) ? 1 : 0);
    }
  } else {
    int64_t d = divisor >= 9.2e18 ? kInt64Max : static_cast<int64_t>(std::floor(divisor));
    int64_t each = std::max(bracket_trials.back(), d);
    for (size_t i = 0; i < n; ++i) out[i] = each;
  }
  for (size_t i = 0; i < n; ++i) out[i] = std::max<int64_t>(1, std::min(out[i], bracket_trials[i]));
  return out;
}

absl::StatusOr<AshaLayout> AshaLayoutFor(const ExperimentConfig& config, int64_t max_length) {
  const SearcherConfig& sc = config.searcher;
  std::string name(SearcherNameToString(sc.name));
  if (!IsSuccessiveHalving(sc.name)) {
    return absl::InvalidArgumentError(absl::StrCat("searcher '", name, "' is not a successive-halving searcher"));
  }
  if (max_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the searcher length (searcher.max_length or max_time) must be at least 1, got ", max_length));
  }
  if (sc.max_trials < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.max_trials must be at least 1 for ", name, ", got ", sc.max_trials));
  }
  if (sc.max_concurrent_trials < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.max_concurrent_trials must be >= 0, got ", sc.max_concurrent_trials));
  }
  if (!(sc.divisor > 1) || !std::isfinite(sc.divisor)) {
    return absl::InvalidArgumentError(absl::StrCat("searcher.divisor must be greater than 1, got ", sc.divisor));
  }
  AshaLayout layout;
  layout.divisor = sc.divisor;
  layout.stop_once = sc.stop_once;
  layout.smaller_is_better = sc.smaller_is_better;
  if (sc.name == SearcherName::kAsyncHalving) {
    if (sc.num_rungs < 1 || sc.num_rungs > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("searcher.num_rungs must be between 1 and 64, got ", sc.num_rungs));
    }
    AshaBracket b;
    b.num_rungs = sc.num_rungs;
    b.rung_lengths = AshaRungLengths(sc.num_rungs, sc.divisor, max_length);
    b.max_trials = sc.max_trials;
    if (sc.max_concurrent_trials > 0) {
      b.max_concurrent_trials = std::min(sc.max_concurrent_trials, sc.max_trials);
    } else {
      // Determined's default: clamp(floor(divisor^(num_rungs-1)), 1,
      // max_trials), the power computed only as far as it matters.
      double p = 1;
      for (int64_t i = 0; i < sc.num_rungs - 1 && p < static_cast<double>(sc.max_trials); ++i) p *= sc.divisor;
      int64_t c = p >= static_cast<double>(sc.max_trials) ? sc.max_trials : static_cast<int64_t>(std::floor(p));
      b.max_concurrent_trials = std::max<int64_t>(1, c);
    }
    layout.brackets.push_back(std::move(b));
    return layout;
  }
  if (sc.max_rungs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("searcher.max_rungs must be at least 1, got ", sc.max_rungs));
  }
  std::vector<int64_t> rungs = sc.bracket_rungs;
  for (int64_t r : rungs) {
    if (r < 1 || r > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("searcher.bracket_rungs entries must be between 1 and 64, got ", r));
    }
  }
  if (rungs.empty()) {
    rungs = AshaModeBrackets(sc.mode, AshaMaxRungs(sc.max_rungs, sc.divisor, max_length, sc.max_trials));
  }
  std::sort(rungs.begin(), rungs.end(), std::greater<int64_t>());
  std::vector<int64_t> trials = AshaBracketTrials(sc.max_trials, sc.divisor, rungs);
  // Brackets with no trial are dropped (only when max_trials < brackets).
  std::vector<int64_t> kept_rungs, kept_trials;
  for (size_t i = 0; i < rungs.size(); ++i) {
    if (trials[i] > 0) {
      kept_rungs.push_back(rungs[i]);
      kept_trials.push_back(trials[i]);
    }
  }
  std::vector<int64_t> concurrency = AshaBracketConcurrency(sc.max_concurrent_trials, sc.divisor, kept_trials);
  for (size_t i = 0; i < kept_rungs.size(); ++i) {
    AshaBracket b;
    b.num_rungs = kept_rungs[i];
    b.rung_lengths = AshaRungLengths(kept_rungs[i], sc.divisor, max_length);
    b.max_trials = kept_trials[i];
    b.max_concurrent_trials = concurrency[i];
    layout.brackets.push_back(std::move(b));
  }
  if (sc.options.bracket_order == BracketOrder::kAggressiveFirst && sc.max_concurrent_trials > 0 &&
      layout.brackets.size() > 1) {
    layout.shared_concurrency = sc.max_concurrent_trials;
  }
  return layout;
}

}  // namespace master
}  // namespace det
