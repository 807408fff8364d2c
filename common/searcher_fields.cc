#include "common/searcher_fields.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hparams.h"

namespace det {
namespace {

bool Asha(const SearcherConfig& s) { return IsSuccessiveHalving(s.name); }
bool AdaptiveAsha(const SearcherConfig& s) { return s.name == SearcherName::kAdaptiveAsha; }
bool AsyncHalving(const SearcherConfig& s) { return s.name == SearcherName::kAsyncHalving; }
bool Pbt(const SearcherConfig& s) { return s.name == SearcherName::kPbt; }
bool AshaWithTpe(const SearcherConfig& s) { return Asha(s) && s.options.sampler == HParamSampler::kTpe; }
bool Tpe(const SearcherConfig& s) { return s.name == SearcherName::kTpe || AshaWithTpe(s); }
bool AdaptiveAshaWithTpe(const SearcherConfig& s) { return AdaptiveAsha(s) && AshaWithTpe(s); }

// A field that only some searchers read: `reads` says whether `s` does,
// `readers` names them in the warning.
struct SearcherField {
  std::string_view key;
  bool (*reads)(const SearcherConfig& s);
  std::string_view readers;
};

constexpr std::string_view kAshaReaders = "adaptive_asha and async_halving";
constexpr std::string_view kTpeReaders = "tpe, and adaptive_asha or async_halving with sampler: tpe";

// common/config_fields.cc names the file that reads each of these fields.
constexpr SearcherField kFields[] = {
    {"divisor", Asha, kAshaReaders},
    {"max_rungs", AdaptiveAsha, "adaptive_asha"},
    {"mode", AdaptiveAsha, "adaptive_asha"},
    {"bracket_rungs", AdaptiveAsha, "adaptive_asha"},
    {"stop_once", Asha, kAshaReaders},
    {"num_rungs", AsyncHalving, "async_halving"},
    {"population_size", Pbt, "pbt"},
    {"perturb_period", Pbt, "pbt"},
    {"burn_in_period", Pbt, "pbt"},
    {"truncate_fraction", Pbt, "pbt"},
    {"resample_probability", Pbt, "pbt"},
    {"perturb_factors", Pbt, "pbt"},
    {"explore", Pbt, "pbt"},
    {"sampler", Asha, kAshaReaders},
    {"n_startup_trials", Tpe, kTpeReaders},
    {"gamma", Tpe, kTpeReaders},
    {"n_ei_candidates", Tpe, kTpeReaders},
    {"random_fraction", Tpe, kTpeReaders},
    {"multivariate", Tpe, kTpeReaders},
    {"rung_metric", Asha, kAshaReaders},
    {"bracket_order", AdaptiveAsha, "adaptive_asha"},
    {"tpe_brackets", AdaptiveAshaWithTpe, "adaptive_asha with sampler: tpe"},
    {"model_promotions", AshaWithTpe, "async_halving and adaptive_asha with sampler: tpe"},
};

}  // namespace

std::vector<std::string> SearcherFieldWarnings(const SearcherConfig& searcher, const nlohmann::json& raw_searcher) {
  std::vector<std::string> warnings;
  if (!raw_searcher.is_object()) return warnings;
  for (const SearcherField& f : kFields) {
    auto it = raw_searcher.find(std::string(f.key));
    if (it == raw_searcher.end() || it->is_null() || f.reads(searcher)) continue;
    // Name the sampler where it decides (an ASHA searcher would read a TPE
    // option with sampler: tpe).
    SearcherConfig with_tpe = searcher;
    with_tpe.options.sampler = HParamSampler::kTpe;
    std::string sampler = Asha(searcher) && !AshaWithTpe(searcher) && f.reads(with_tpe) ? " with sampler: random" : "";
    warnings.push_back(absl::StrCat("field 'searcher.", std::string(f.key), "' is accepted but not used by searcher '",
                                    std::string(SearcherNameToString(searcher.name)), "'", sampler,
                                    " (it is read by ", std::string(f.readers), ")"));
  }
  return warnings;
}

std::optional<std::string> PbtExploreWarning(const ExperimentConfig& config) {
  if (config.searcher.name != SearcherName::kPbt || !config.searcher.options.pbt.explore.empty()) return std::nullopt;
  constexpr size_t kNamed = 8;
  std::vector<std::string> shaped, smooth;
  size_t more = 0;
  for (const auto& [name, hp] : config.hyperparameters) {  // a map: in name order
    if (!IsSearched(hp)) continue;
    switch (hp.type) {
      case Hyperparameter::Type::kInt:
      case Hyperparameter::Type::kCategorical:
      case Hyperparameter::Type::kObject:
        if (shaped.size() < kNamed) {
          shaped.push_back(absl::StrCat("'", name, "' (", std::string(HyperparameterTypeName(hp.type)), ")"));
        } else {
          ++more;
        }
        break;
      case Hyperparameter::Type::kDouble:
      case Hyperparameter::Type::kLog:
        if (smooth.size() < kNamed) smooth.push_back(name);
        break;
      case Hyperparameter::Type::kConst:
        break;
    }
  }
  if (shaped.empty()) return std::nullopt;
  std::string named = absl::StrJoin(shaped, ", ");
  if (more > 0) absl::StrAppend(&named, " and ", more, " more");
  std::string example = smooth.empty() ? "" : absl::StrCat(" (for example [", absl::StrJoin(smooth, ", "), "])");
  return absl::StrCat("searcher.explore is not set, so a pbt child may change every search hyperparameter, ",
                      "including ", named, "; a child whose change alters a model's shape fails to restore its ",
                      "parent's checkpoint. List the hyperparameters a child may change in searcher.explore",
                      example);
}

}  // namespace det
