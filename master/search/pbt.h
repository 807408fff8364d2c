// Population-based training (`searcher.name: pbt`; Jaderberg et al., 2017,
// truncation selection as in Determined <= 0.37 and Ray Tune). Pure decision
// code like every search method (see searcher.h).
//
// Semantics (lengths in the searcher's unit; P = population_size, T =
// perturb_period, k = max(1, floor(P * truncate_fraction))):
//  - Initially P trials with sampled hparams, each ValidateAfter(T).
//  - Round r ends when every live trial has validated at >= r*T (a trial that
//    has validated waits: no op, so the master checkpoints it and frees its
//    slot). Then, if r*T >= max_length, every live trial is closed and the
//    search shuts down once all have ended. Otherwise the trials are ranked
//    by that validation (smaller_is_better; non-finite last; ties: lower
//    request id first). A round with r*T < burn_in_period (burn-in; unset:
//    max_length / 2, BurnInOrDefault) ends there: every trial gets
//    ValidateAfter(min((r+1)*T, max_length)). Otherwise the bottom k are
//    closed (exploited), and each of the top k begets a child: Create with
//    parent = the top trial (the master starts it from the parent's
//    checkpoint at r*T, model AND optimizer state) and hparams explored from
//    the parent's: each search hparam is resampled from the space with
//    probability resample_probability, otherwise perturbed (double/log/int:
//    times a factor drawn uniformly from perturb_factors, clamped to the
//    range, int rounded; categorical: a neighbouring value, index +-1
//    clamped), consts kept; with `explore` set, only the named top-level
//    hparams are explored and the others are the parent's (hparams that set
//    the model's shape must be kept: the child restores the parent's weights,
//    and the runtime refuses a checkpoint of another shape); the draws are
//    made for every hparam either way, so the list changes no other hparam's
//    draw; the child's trial seed is the parent's (it continues the parent's
//    run, data order included); then ValidateAfter(min((r+1)*T, max_length)).
//    After the children, every other trial (top ones included) gets
//    ValidateAfter(min((r+1)*T, max_length)).
//  - A trial that exits early leaves the population (it is not replaced); a
//    round whose remaining trials have all validated ends at once. When no
//    trial is left: Shutdown (failure when every trial that ended errored).
//  - Each member's parent (0 for the first generation) is in the snapshot.
//  - Progress: finished rounds / rounds (ceil(max_length / T)).
// Errors (NewPbtSearch): InvalidArgument for population_size < 2,
// perturb_period < 1, burn_in_period outside [0, max_length), or an
// `explore` entry that is not a search hparam of the space (naming
// searcher.explore[i]).
#ifndef DET_MASTER_SEARCH_PBT_H_
#define DET_MASTER_SEARCH_PBT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "master/search/searcher.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {

absl::StatusOr<std::unique_ptr<SearchMethod>> NewPbtSearch(const ExperimentConfig& config, int64_t max_length);

// The hparams of a PBT child: `parent` explored as described above (pure:
// the rng decides).
nlohmann::json ExploreHParams(const HyperparameterSpace& space, const PbtOptions& options,
                              const nlohmann::json& parent, std::mt19937_64& rng);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_PBT_H_
