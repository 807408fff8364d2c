#include "master/core/checkpoint_gc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include <nlohmann/json.hpp>

namespace det::master {

::det::api::v1::CheckpointGcPolicy EffectiveGcPolicy(const ExperimentConfig& config,
                                                     const std::string& override_json) {
  ::det::api::v1::CheckpointGcPolicy p;
  CheckpointStorageConfig defaults;
  const CheckpointStorageConfig& c = config.checkpoint_storage ? *config.checkpoint_storage : defaults;
  p.set_save_experiment_best(static_cast<int32_t>(c.save_experiment_best));
  p.set_save_trial_best(static_cast<int32_t>(c.save_trial_best));
  p.set_save_trial_latest(static_cast<int32_t>(c.save_trial_latest));
  if (override_json.empty()) return p;
  nlohmann::json j = nlohmann::json::parse(override_json, nullptr, false);
  if (!j.is_object()) return p;
  auto count = [&](const char* key, int32_t fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int32_t>() : fallback;
  };
  p.set_save_experiment_best(count("save_experiment_best", p.save_experiment_best()));
  p.set_save_trial_best(count("save_trial_best", p.save_trial_best()));
  p.set_save_trial_latest(count("save_trial_latest", p.save_trial_latest()));
  return p;
}

std::set<std::string> CheckpointsToKeep(const std::vector<CheckpointRow>& checkpoints,
                                        const ::det::api::v1::CheckpointGcPolicy& policy, bool smaller_is_better) {
  using Ptr = const CheckpointRow*;
  auto better = [&](Ptr a, Ptr b) {
    if (*a->searcher_metric != *b->searcher_metric) {
      return smaller_is_better ? *a->searcher_metric < *b->searcher_metric
                               : *a->searcher_metric > *b->searcher_metric;
    }
    return a->total_batches > b->total_batches;
  };
  auto later = [](Ptr a, Ptr b) {
    return a->total_batches != b->total_batches ? a->total_batches > b->total_batches : a->time_ms > b->time_ms;
  };
  std::set<std::string> keep;
  auto keep_first = [&](std::vector<Ptr> v, int64_t n, auto cmp) {
    std::stable_sort(v.begin(), v.end(), cmp);
    for (int64_t i = 0; i < n && i < static_cast<int64_t>(v.size()); ++i) keep.insert(v[i]->uuid);
  };
  std::vector<Ptr> scored;
  std::map<int64_t, std::vector<Ptr>> by_trial, scored_by_trial;
  for (const CheckpointRow& c : checkpoints) {
    if (c.state != "COMPLETED") continue;
    by_trial[c.trial_id].push_back(&c);
    if (c.searcher_metric && !std::isnan(*c.searcher_metric)) {
      scored.push_back(&c);
      scored_by_trial[c.trial_id].push_back(&c);
    }
  }
  keep_first(scored, policy.save_experiment_best(), better);
  for (auto& [tid, v] : scored_by_trial) keep_first(v, policy.save_trial_best(), better);
  for (auto& [tid, v] : by_trial) keep_first(v, policy.save_trial_latest(), later);
  return keep;
}

}  // namespace det::master
