#include "common/search_options.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/config_reader.h"
#include "common/status_macros.h"

namespace det {
namespace {

absl::Status GetFraction(const ConfigMapReader& r, std::string_view key, double lo, bool lo_open, double hi,
                         double* out) {
  DET_RETURN_IF_ERROR(r.GetDouble(key, out));
  bool ok = (lo_open ? *out > lo : *out >= lo) && *out <= hi;
  if (!ok) {
    return r.TypeError(key, absl::StrCat("a number in ", lo_open ? "(" : "[", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

// The same for an optional field: left unset when the map lacks `key`.
absl::Status GetFraction(const ConfigMapReader& r, std::string_view key, double lo, bool lo_open, double hi,
                         std::optional<double>* out) {
  if (r.Find(key) == nullptr) return absl::OkStatus();
  double v = 0;
  DET_RETURN_IF_ERROR(GetFraction(r, key, lo, lo_open, hi, &v));
  *out = v;
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string_view>& SearchOptionKeys() {
  static const std::vector<std::string_view> keys = {
      "population_size", "perturb_period", "burn_in_period", "truncate_fraction", "resample_probability",
      "perturb_factors", "sampler",        "n_startup_trials", "gamma",           "n_ei_candidates",
      "rung_metric",     "random_fraction", "bracket_order",  "tpe_brackets",    "explore",
      "multivariate",    "model_promotions"};
  return keys;
}

absl::Status ParseSearchOptions(const ConfigMapReader& r, bool is_pbt, SearchOptions* out) {
  PbtOptions& p = out->pbt;
  if (is_pbt && r.Find("population_size") == nullptr) return r.Missing("population_size");
  if (is_pbt && r.Find("perturb_period") == nullptr) return r.Missing("perturb_period");
  DET_RETURN_IF_ERROR(r.GetInt("population_size", &p.population_size, 2, kMaxPopulationSize));
  DET_RETURN_IF_ERROR(r.GetInt("perturb_period", &p.perturb_period, 1));
  DET_RETURN_IF_ERROR(r.GetInt("burn_in_period", &p.burn_in_period, 0));
  DET_RETURN_IF_ERROR(GetFraction(r, "truncate_fraction", 0, true, 0.5, &p.truncate_fraction));
  DET_RETURN_IF_ERROR(GetFraction(r, "resample_probability", 0, false, 1, &p.resample_probability));
  if (const nlohmann::json* f = r.Find("perturb_factors"); f != nullptr && !f->is_null()) {
    if (!f->is_array() || f->empty() || f->size() > kMaxPerturbFactors) {
      return r.TypeError("perturb_factors", absl::StrCat("a list of 1 to ", kMaxPerturbFactors, " positive numbers"));
    }
    p.perturb_factors.clear();
    for (size_t i = 0; i < f->size(); ++i) {
      const std::string path = absl::StrCat(r.PathOf("perturb_factors"), "[", i, "]");
      DET_ASSIGN_OR_RETURN(double v, ConfigMapReader::CheckDouble(r.source(), (*f)[i], path));
      if (!(v > 0) || v > 1e6) {
        return r.TypeError("perturb_factors", absl::StrCat("a list of positive numbers (entry ", i, " is ", v, ")"));
      }
      p.perturb_factors.push_back(v);
    }
  }
  DET_RETURN_IF_ERROR(r.GetStringList("explore", &p.explore));
  if (p.explore.size() > kMaxExplore) {
    return r.TypeError("explore", absl::StrCat("a list of at most ", kMaxExplore, " hyperparameter names"));
  }
  for (size_t i = 0; i < p.explore.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (p.explore[j] == p.explore[i]) {
        return r.Error("explore", absl::StrCat("field '", r.PathOf("explore"), "' names '", p.explore[i], "' twice"));
      }
    }
  }
  std::string sampler;
  DET_RETURN_IF_ERROR(r.GetEnum("sampler", {"random", "tpe"}, &sampler));
  if (sampler == "tpe") out->sampler = HParamSampler::kTpe;
  TpeOptions& t = out->tpe;
  DET_RETURN_IF_ERROR(r.GetInt("n_startup_trials", &t.n_startup_trials, 1, 1000000));
  DET_RETURN_IF_ERROR(GetFraction(r, "gamma", 0, true, 0.99, &t.gamma));
  DET_RETURN_IF_ERROR(r.GetInt("n_ei_candidates", &t.n_ei_candidates, 1, kMaxEiCandidates));
  DET_RETURN_IF_ERROR(GetFraction(r, "random_fraction", 0, false, 1, &t.random_fraction));
  DET_RETURN_IF_ERROR(r.GetBool("multivariate", &t.multivariate));
  std::string rung_metric;
  DET_RETURN_IF_ERROR(r.GetEnum("rung_metric", {"latest", "best"}, &rung_metric));
  if (rung_metric == "best") out->rung_metric = RungMetric::kBest;
  std::string bracket_order;
  DET_RETURN_IF_ERROR(r.GetEnum("bracket_order", {"aggressive_first", "parallel"}, &bracket_order));
  if (bracket_order == "parallel") out->bracket_order = BracketOrder::kParallel;
  std::string tpe_brackets;
  DET_RETURN_IF_ERROR(r.GetEnum("tpe_brackets", {"after_first", "all"}, &tpe_brackets));
  if (tpe_brackets == "all") out->tpe_brackets = TpeBrackets::kAll;
  DET_RETURN_IF_ERROR(r.GetBool("model_promotions", &out->model_promotions));
  return absl::OkStatus();
}

}  // namespace det
