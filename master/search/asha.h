// Asynchronous successive halving (Determined's `async_halving`) and its
// multi-bracket form (`adaptive_asha`): the bracket layout computed from a
// config and the SearchMethod that runs it. Pure decision code, as every
// search method (see searcher.h).
//
//   absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, max_length);
//   std::unique_ptr<SearchMethod> m = NewAshaSearch(config, *layout);
//
// Most callers use NewSearchMethod (searcher.h), which calls these. The free
// functions are pure and thread-safe; the search method is not thread-safe.
#ifndef DET_MASTER_SEARCH_ASHA_H_
#define DET_MASTER_SEARCH_ASHA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "master/search/searcher.h"

namespace det {
namespace master {

// One successive-halving bracket.
struct AshaBracket {
  int64_t num_rungs = 1;
  // The length (searcher units) a trial has trained when it validates at rung i, ascending
  // (equal neighbours possible for a short max_length); size num_rungs.
  std::vector<int64_t> rung_lengths;
  int64_t max_trials = 0;             // trials the bracket creates (>= 1)
  int64_t max_concurrent_trials = 1;  // trials training at once (>= 1)
};

bool operator==(const AshaBracket& a, const AshaBracket& b);

// The brackets of an adaptive_asha or async_halving config, most rungs first.
struct AshaLayout {
  std::vector<AshaBracket> brackets;
  double divisor = 4;
  bool stop_once = false;
  bool smaller_is_better = true;
  // > 0 (adaptive_asha, bracket_order: aggressive_first, max_concurrent_trials
  // > 0, several brackets): the brackets share this many training trials, and
  // a bracket creates a trial only once every bracket before it (more rungs)
  // has created all of its own, Hyperband's order; the brackets'
  // max_concurrent_trials do not apply then. 0: each bracket its own.
  int64_t shared_concurrency = 0;
};

// floor(n / divisor^e) for n >= 0, divisor > 1, e >= 0, exact: the q with
// q * divisor^e <= n < (q + 1) * divisor^e (integer arithmetic when divisor is
// an integer, a corrected double quotient otherwise).
int64_t AshaFloorDivPow(int64_t n, double divisor, int64_t e);

// floor(log_divisor(x)) + 1 for x >= 1, computed by exact repeated
// multiplication (so for divisor 4: 16 -> 3, 15 -> 2); 1 for x < divisor.
int64_t AshaRungsFor(double divisor, int64_t x);

// adaptive_asha's number of rungs: min(max_rungs, AshaRungsFor(divisor,
// max_length), AshaRungsFor(divisor, max_trials)), at least 1.
int64_t AshaMaxRungs(int64_t max_rungs, double divisor, int64_t max_length, int64_t max_trials);

// The rungs of each bracket of `mode` (Determined's adaptive modes), most
// first: aggressive [R]; standard R, R-1, ..., (R-1)/2+1 (that is R-(R-1)/2
// brackets: R=3 -> [3,2], R=4 -> [4,3,2], R=5 -> [5,4,3]); conservative R..1.
std::vector<int64_t> AshaModeBrackets(AshaMode mode, int64_t max_rungs);

// Rung lengths of a bracket: rung i (0-based) is max(1, floor(max_length /
// divisor^(num_rungs-1-i))) (searcher units: batches, epochs, tokens, ...); exact integer arithmetic when divisor is
// an integer (937 batches, divisor 4, 3 rungs: 58, 234, 937).
std::vector<int64_t> AshaRungLengths(int64_t num_rungs, double divisor, int64_t max_length);

// Determined's split of max_trials over brackets (`bracket_rungs` most rungs
// first): bracket b has weight w_b = divisor^(rungs_b-1) / rungs_b (roughly
// equal training budget per bracket) and gets max(1, floor(max_trials * w_b /
// sum w)) trials; what is left over goes to the first bracket. Our additions
// for degenerate inputs: when that sum exceeds max_trials, one trial at a
// time is taken back from the bracket with the most (first on ties) while it
// has more than one; when max_trials < number of brackets, the first
// max_trials brackets get one trial and the others none.
std::vector<int64_t> AshaBracketTrials(int64_t max_trials, double divisor, const std::vector<int64_t>& bracket_rungs);

// Determined's split of max_concurrent_trials over brackets:
//  - > 0: max(max_concurrent_trials, brackets) split evenly, the remainder
//    one each to the first brackets (so every bracket gets >= 1, and the sum
//    exceeds max_concurrent_trials only when it is below the bracket count);
//  - 0 (no limit given): each bracket max(trials of the last bracket,
//    floor(divisor)): about the same number of trials in flight per bracket.
// Each is then capped to the bracket's trials and raised to at least 1.
std::vector<int64_t> AshaBracketConcurrency(int64_t max_concurrent_trials, double divisor,
                                            const std::vector<int64_t>& bracket_trials);

// The layout of `config.searcher`:
//  - adaptive_asha: bracket_rungs when given (sorted most first), otherwise
//    AshaModeBrackets(mode, AshaMaxRungs(...)); trials and concurrency split
//    by AshaBracketTrials / AshaBracketConcurrency; brackets left with no
//    trial are dropped.
//  - async_halving: one bracket of searcher.num_rungs rungs, max_trials
//    trials; concurrency max_concurrent_trials capped to max_trials, or when 0
//    Determined's default clamp(divisor^(num_rungs-1), 1, max_trials) (enough
//    trials for one to reach the top rung).
// InvalidArgument: another searcher, max_length < 1, max_trials < 1,
// negative max_concurrent_trials, divisor <= 1, num_rungs/max_rungs/
// bracket_rungs < 1.
absl::StatusOr<AshaLayout> AshaLayoutFor(const ExperimentConfig& config, int64_t max_length);

// The search method running `layout` (see NewSearchMethod in searcher.h for
// the semantics); `config` gives the name and the hyperparameter space.
// Requires `layout` from AshaLayoutFor(config, ...).
std::unique_ptr<SearchMethod> NewAshaSearch(const ExperimentConfig& config, AshaLayout layout);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_ASHA_H_
