// Options of the searchers added after Determined's set: population-based
// training (`searcher.name: pbt`), the tree-structured Parzen estimator
// (`searcher.name: tpe`, or `sampler: tpe` under async_halving /
// adaptive_asha) and ASHA's robustness options. Parsed from the `searcher`
// map by ParseSearchOptions (common/search_options.cc), called by the
// experiment config parser.
//
//   searcher:
//     name: pbt
//     population_size: 8          # trials alive at once (required, 2..1000)
//     perturb_period: 50          # searcher units between exploit/explore (required)
//     burn_in_period: 128         # no exploit/explore in rounds ending before this
//                                 # (default: half of max_length)
//     truncate_fraction: 0.25     # bottom fraction replaced each round (0, 0.5]
//     resample_probability: 0.25  # per hparam: resample instead of perturb
//     perturb_factors: [0.8, 1.2] # a perturbed number is multiplied by one
//     explore: [learning_rate]    # the hparams a child may change (default: all);
//                                 # the others are the parent's (its model's shape)
//
//     name: tpe                   # or adaptive_asha / async_halving + sampler: tpe
//     n_startup_trials: 10        # random trials before the model is used
//     gamma: 0.25                 # fraction of observations that are "good"
//     n_ei_candidates: 24         # candidates drawn from l(x) per proposal
//     random_fraction: 0          # [0, 1] proposals drawn at random after startup
//                                 # (default 1/3 with sampler: tpe, as BOHB)
//     multivariate: true          # joint estimators over all hparams (Optuna's;
//                                 # default false with sampler: tpe)
//     model_promotions: false     # sampler: tpe: the model of longer results may
//                                 # promote floor(n/divisor^2) more of a rung
//
//     rung_metric: latest         # adaptive_asha/async_halving: latest | best
//     bracket_order: aggressive_first  # adaptive_asha: aggressive_first | parallel
#ifndef DET_COMMON_SEARCH_OPTIONS_H_
#define DET_COMMON_SEARCH_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace det {

class ConfigMapReader;

inline constexpr int64_t kMaxPopulationSize = 1000;
inline constexpr size_t kMaxPerturbFactors = 16;
inline constexpr size_t kMaxExplore = 256;
// TPE's cost per proposal is candidates x hparams x modelled trials, under
// the master's lock: both are capped (kMaxTpeModelTrials in tpe.h).
inline constexpr int64_t kMaxEiCandidates = 1000;

struct PbtOptions {
  int64_t population_size = 0;  // required for pbt; 2..kMaxPopulationSize
  int64_t perturb_period = 0;   // required for pbt; >= 1, searcher units
  // >= 0, searcher units (Ray Tune's burn_in_period): a round that ends
  // before this length exploits and explores nothing, so that no member is
  // replaced on a ranking made that early; NewPbtSearch refuses one that is
  // not below max_length (nothing would ever be exploited). Unset: half of
  // max_length (BurnInOrDefault; Ray's default is 0, measured in docs/design/2026-11-search-study.md).
  std::optional<int64_t> burn_in_period;
  double truncate_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturb_factors = {0.8, 1.2};  // each > 0, 1..16 entries
  // Top-level hparam names a child explores, each once, at most kMaxExplore;
  // empty: every search hparam. NewPbtSearch checks them against the space.
  std::vector<std::string> explore;
};

// The burn_in_period a PBT search uses: the given one, else half of the
// searcher's length (`max_length`, in its unit), so that a late bloomer is
// not replaced on a ranking made in the first half of its training.
inline int64_t BurnInOrDefault(const PbtOptions& p, int64_t max_length) {
  return p.burn_in_period.value_or(max_length / 2);
}

// TPE's random_fraction under ASHA unless the config gives one (BOHB's rho;
// measured in docs/design/2026-11-search-study.md).
inline constexpr double kAshaTpeRandomFraction = 1.0 / 3;

struct TpeOptions {
  int64_t n_startup_trials = 10;  // >= 1
  double gamma = 0.25;            // (0, 1)
  int64_t n_ei_candidates = 24;   // 1..kMaxEiCandidates
  // [0, 1]: after the startup trials, the share of proposals drawn at random
  // instead of from the model (BOHB's rho), so that the search keeps covering
  // the space where the model settled early. Unset: kAshaTpeRandomFraction
  // under ASHA (BOHB's), 0 for `searcher.name: tpe` (Optuna's).
  std::optional<double> random_fraction;
  // Optuna's multivariate TPE: l(x) and g(x) are joint estimators (one kernel
  // per trial over all the hparams at once) instead of a product of one
  // estimator per hparam, so interactions (a learning rate that is good only
  // with a small width) shape the proposals. Unset: true for `searcher.name:
  // tpe`, false under ASHA (measured in docs/design/2026-11-search-study.md; a sampler given unset
  // options models univariately).
  std::optional<bool> multivariate;
};

// The random_fraction a TPE sampler uses: the given one, else the default
// of where it runs (`under_asha`: ASHA's sampler; else the tpe searcher).
inline double RandomFractionOrDefault(const TpeOptions& t, bool under_asha) {
  return t.random_fraction.value_or(under_asha ? kAshaTpeRandomFraction : 0);
}
// Likewise for multivariate.
inline bool MultivariateOrDefault(const TpeOptions& t, bool under_asha) { return t.multivariate.value_or(!under_asha); }

enum class HParamSampler { kRandom, kTpe };
// How ASHA ranks a trial at a rung: its latest validation, or the best it
// has reported so far (smooths noisy early rungs).
enum class RungMetric { kLatest, kBest };
// How adaptive_asha's brackets share max_concurrent_trials (when it is > 0):
// kAggressiveFirst, Hyperband's order: the brackets share the slots and a
// bracket starts trials only once every bracket with more rungs has started
// all of its own; kParallel, Determined's: each bracket its own share.
enum class BracketOrder { kAggressiveFirst, kParallel };
// Which of adaptive_asha's brackets take TPE's proposals (sampler: tpe):
// kAfterFirst, every bracket but the first (the one with the most rungs,
// whose trials draw at random as with sampler: random, Hyperband's cheap
// exploration; their results feed the model); kAll, every bracket. With a
// single bracket (async_halving included) that bracket takes them either way.
enum class TpeBrackets { kAfterFirst, kAll };

struct SearchOptions {
  PbtOptions pbt;
  TpeOptions tpe;
  HParamSampler sampler = HParamSampler::kRandom;  // async_halving, adaptive_asha
  RungMetric rung_metric = RungMetric::kLatest;    // async_halving, adaptive_asha
  BracketOrder bracket_order = BracketOrder::kAggressiveFirst;  // adaptive_asha
  TpeBrackets tpe_brackets = TpeBrackets::kAfterFirst;          // adaptive_asha, sampler: tpe
  std::optional<bool> model_promotions;  // async_halving, adaptive_asha with sampler: tpe
};

// model_promotions as given, else its default.
inline bool ModelPromotionsOrDefault(std::optional<bool> model_promotions) { return model_promotions.value_or(false); }

// The keys ParseSearchOptions reads (for the searcher map's CheckKeys).
const std::vector<std::string_view>& SearchOptionKeys();

// Reads the keys above from `r` (the searcher map) into `out`; range errors
// are InvalidArgument naming the field. `is_pbt`: population_size and
// perturb_period are required.
absl::Status ParseSearchOptions(const ConfigMapReader& r, bool is_pbt, SearchOptions* out);

}  // namespace det

#endif  // DET_COMMON_SEARCH_OPTIONS_H_
