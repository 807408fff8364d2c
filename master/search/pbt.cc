#include "master/search/pbt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/hparams.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;

double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

size_t Pick(size_t n, std::mt19937_64& rng) {
  return std::min(n - 1, static_cast<size_t>(Uniform01(rng) * static_cast<double>(n)));
}

json ExploreOne(const Hyperparameter& hp, const PbtOptions& o, const json& value, std::mt19937_64& rng) {
  using T = Hyperparameter::Type;
  if (hp.type == T::kConst) return hp.val;
  if (hp.type == T::kObject) {
    json out = json::object();
    for (const auto& [name, nested] : hp.nested) {
      const json v = value.is_object() && value.contains(name) ? value.at(name) : json(nullptr);
      out[name] = ExploreOne(nested, o, v, rng);
    }
    return out;
  }
  bool resample = Uniform01(rng) < o.resample_probability;
  if (!resample && hp.type == T::kCategorical) {
    auto it = std::find(hp.vals.begin(), hp.vals.end(), value);
    if (it == hp.vals.end()) {
      resample = true;
    } else {
      int64_t i = it - hp.vals.begin();
      i += Uniform01(rng) < 0.5 ? -1 : 1;
      return hp.vals[static_cast<size_t>(std::clamp<int64_t>(i, 0, static_cast<int64_t>(hp.vals.size()) - 1))];
    }
  }
  if (!resample && !value.is_number()) resample = true;
  if (resample) {
    std::mt19937_64& r = rng;
    return SampleHParams(HyperparameterSpace{{"x", hp}}, r).at("x");
  }
  double factor = o.perturb_factors[Pick(o.perturb_factors.size(), rng)];
  double x = value.get<double>() * factor;
  switch (hp.type) {
    case T::kInt:
      return static_cast<int64_t>(std::clamp<double>(std::round(x), hp.minval, hp.maxval));
    case T::kLog:
      return std::clamp(x, std::pow(hp.base, hp.minval), std::pow(hp.base, hp.maxval));
    default:
      return std::clamp(x, hp.minval, hp.maxval);
  }
}

class PbtSearch final : public SearchMethod {
 public:
  PbtSearch(HyperparameterSpace space, PbtOptions options, int64_t max_length, bool smaller_is_better)
      : space_(std::move(space)),
        options_(std::move(options)),
        max_length_(max_length),
        smaller_is_better_(smaller_is_better) {
    const int64_t p = options_.population_size;
    truncate_ = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(p) *
                                                                     options_.truncate_fraction)));
    truncate_ = std::min(truncate_, p / 2);
    rounds_ = (max_length_ + options_.perturb_period - 1) / options_.perturb_period;
  }

  std::vector<SearcherOp> InitialOperations(std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    if (initialized_) return ops;
    initialized_ = true;
    round_ = 1;
    for (int64_t i = 0; i < options_.population_size; ++i) Create(SampleHParams(space_, rng), 0, rng, &ops);
    return ops;
  }

  std::vector<SearcherOp> TrialCreated(RequestId, std::mt19937_64&) override { return {}; }

  std::vector<SearcherOp> ValidationCompleted(RequestId id, double metric, int64_t length,
                                              std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    auto it = members_.find(id);
    if (it == members_.end() || !it->second.live || it->second.reported || length < Target(round_)) return ops;
    double v = smaller_is_better_ ? metric : -metric;
    it->second.score = std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
    it->second.reported = true;
    MaybeEndRound(rng, &ops);
    return ops;
  }

  std::vector<SearcherOp> TrialClosed(RequestId id, std::mt19937_64& rng) override {
    return Leave(id, false, rng);
  }

  std::vector<SearcherOp> TrialExitedEarly(RequestId id, ExitedReason reason, std::mt19937_64& rng) override {
    return Leave(id, reason == ExitedReason::kErrored, rng);
  }

  double Progress() const override {
    if (shutdown_sent_ || rounds_ <= 0) return 1;
    return std::min(1.0, static_cast<double>(round_ - 1) / static_cast<double>(rounds_));
  }

  json Snapshot() const override {
    json members = json::array();
    for (const auto& [id, m] : members_) {
      members.push_back(json{{"id", id},
                             {"hparams", m.hparams},
                             {"parent", m.parent},
                             {"seed", m.seed},
                             {"live", m.live},
                             {"closing", m.closing},
                             {"ended", m.ended},
                             {"reported", m.reported},
                             {"score", std::isfinite(m.score) ? json(m.score) : json(nullptr)}});
    }
    return json{{"searcher", "pbt"},        {"population_size", options_.population_size},
                {"round", round_},           {"next_request_id", next_request_id_},
                {"ended", ended_},           {"errored", errored_},
                {"members", std::move(members)}, {"initialized", initialized_},
                {"shutdown", shutdown_sent_}};
  }

  absl::Status Restore(const json& snapshot) override {
    try {
      if (!snapshot.is_object() || snapshot.value("searcher", "") != "pbt") {
        return absl::InvalidArgumentError("searcher snapshot is not of searcher 'pbt'");
      }
      if (snapshot.at("population_size").get<int64_t>() != options_.population_size) {
        return absl::InvalidArgumentError("searcher snapshot has another population_size than the config");
      }
      PbtSearch s = *this;
      s.members_.clear();
      for (const json& j : snapshot.at("members")) {
        Member m;
        m.hparams = j.at("hparams");
        m.parent = j.at("parent").get<RequestId>();
        m.seed = j.at("seed").get<uint32_t>();
        m.live = j.at("live").get<bool>();
        m.closing = j.at("closing").get<bool>();
        m.ended = j.at("ended").get<bool>();
        m.reported = j.at("reported").get<bool>();
        m.score = j.at("score").is_null() ? std::numeric_limits<double>::infinity() : j.at("score").get<double>();
        s.members_[j.at("id").get<RequestId>()] = std::move(m);
      }
      s.round_ = snapshot.at("round").get<int64_t>();
      s.next_request_id_ = snapshot.at("next_request_id").get<RequestId>();
      s.ended_ = snapshot.at("ended").get<int64_t>();
      s.errored_ = snapshot.at("errored").get<int64_t>();
      s.initialized_ = snapshot.at("initialized").get<bool>();
      s.shutdown_sent_ = snapshot.at("shutdown").get<bool>();
      if (s.round_ < 0 || s.round_ > rounds_ + 1 || s.next_request_id_ < 1 || s.errored_ > s.ended_ ||
          (!s.members_.empty() && s.members_.rbegin()->first >= s.next_request_id_)) {
        return absl::InvalidArgumentError("searcher snapshot has inconsistent counters");
      }
      *this = std::move(s);
      return absl::OkStatus();
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("malformed searcher snapshot: ", e.what()));
    }
  }

 private:
  struct Member {
    json hparams;
    RequestId parent = 0;
    uint32_t seed = 0;
    bool live = true;       // in the current population, training or waiting
    bool closing = false;   // asked to close
    bool ended = false;
    bool reported = false;  // validated for the current round
    double score = 0;       // normalized: smaller is better
  };

  PbtSearch(const PbtSearch&) = default;
  PbtSearch& operator=(PbtSearch&&) = default;

  int64_t Target(int64_t round) const { return std::min(round * options_.perturb_period, max_length_); }

  void Create(json hparams, RequestId parent, std::mt19937_64& rng, std::vector<SearcherOp>* ops) {
    CreateTrialOp c;
    c.request_id = next_request_id_++;
    c.hparams = std::move(hparams);
    c.trial_seed = DrawTrialSeed(rng);
    // A child continues its parent's run, data order included: its seed.
    if (parent != 0) c.trial_seed = members_[parent].seed;
    c.parent = parent;
    Member m;
    m.hparams = c.hparams;
    m.parent = parent;
    m.seed = c.trial_seed;
    members_[c.request_id] = m;
    RequestId id = c.request_id;
    ops->push_back(std::move(c));
    ops->push_back(ValidateAfterOp{id, Target(round_)});
  }

  std::vector<SearcherOp> Leave(RequestId id, bool errored, std::mt19937_64& rng) {
    std::vector<SearcherOp> ops;
    auto it = members_.find(id);
    if (it == members_.end() || it->second.ended) return ops;
    it->second.ended = true;
    it->second.live = false;
    ++ended_;
    if (errored) ++errored_;
    MaybeEndRound(rng, &ops);
    MaybeShutdown(&ops);
    return ops;
  }

  void MaybeEndRound(std::mt19937_64& rng, std::vector<SearcherOp>* ops) {
    std::vector<RequestId> live;
    for (const auto& [id, m] : members_) {
      if (!m.live) continue;
      if (!m.reported) return;
      live.push_back(id);
    }
    if (live.empty() || round_ > rounds_) return;
    if (Target(round_) >= max_length_) {
      round_ = rounds_ + 1;
      for (RequestId id : live) Close(id, ops);
      return;
    }
    std::stable_sort(live.begin(), live.end(),
                     [&](RequestId a, RequestId b) { return members_[a].score < members_[b].score; });
    const size_t n = live.size();
    // Burn-in: a round that ends before burn_in_period replaces no member.
    const bool burn_in = Target(round_) < options_.burn_in_period.value_or(0);  // resolved by NewPbtSearch
    const size_t k = burn_in ? 0 : std::min(static_cast<size_t>(truncate_), n / 2);
    ++round_;
    for (size_t i = 0; i < n; ++i) members_[live[i]].reported = false;
    for (size_t i = n - k; i < n; ++i) Close(live[i], ops);
    // Children first: they copy their parents' state at this round's end.
    for (size_t i = 0; i < k; ++i) {
      Create(ExploreHParams(space_, options_, members_[live[i]].hparams, rng), live[i], rng, ops);
    }
    for (size_t i = 0; i + k < n; ++i) ops->push_back(ValidateAfterOp{live[i], Target(round_)});
  }

  void Close(RequestId id, std::vector<SearcherOp>* ops) {
    Member& m = members_[id];
    m.live = false;
    m.closing = true;
    ops->push_back(CloseTrialOp{id});
  }

  void MaybeShutdown(std::vector<SearcherOp>* ops) {
    if (shutdown_sent_) return;
    for (const auto& [id, m] : members_) {
      if (!m.ended) return;
    }
    shutdown_sent_ = true;
    round_ = rounds_ + 1;
    ops->push_back(ShutdownOp{ended_ > 0 && errored_ == ended_});
  }

  HyperparameterSpace space_;
  PbtOptions options_;
  int64_t max_length_;
  bool smaller_is_better_;
  int64_t truncate_ = 1;
  int64_t rounds_ = 1;

  std::map<RequestId, Member> members_;
  int64_t round_ = 0;  // 1-based; rounds_ + 1 once the last round ended
  RequestId next_request_id_ = 1;
  int64_t ended_ = 0;
  int64_t errored_ = 0;
  bool initialized_ = false;
  bool shutdown_sent_ = false;
};

}  // namespace

json ExploreHParams(const HyperparameterSpace& space, const PbtOptions& options, const json& parent,
                    std::mt19937_64& rng) {
  const std::vector<std::string>& o = options.explore;
  json out = json::object();
  for (const auto& [name, hp] : space) {
    const json v = parent.is_object() && parent.contains(name) ? parent.at(name) : json(nullptr);
    // Drawn for every hparam, explored or not, so that which ones are
    // explored changes no other hparam's draw.
    json explored = ExploreOne(hp, options, v, rng);
    const bool kept = !o.empty() && std::find(o.begin(), o.end(), name) == o.end() && !v.is_null();
    out[name] = kept ? v : std::move(explored);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SearchMethod>> NewPbtSearch(const ExperimentConfig& config, int64_t max_length) {
  const PbtOptions& o = config.searcher.options.pbt;
  if (o.population_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.population_size must be at least 2 for pbt, got ", o.population_size));
  }
  if (o.perturb_period < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.perturb_period must be at least 1 for pbt, got ", o.perturb_period));
  }
  if (o.perturb_factors.empty()) return absl::InvalidArgumentError("searcher.perturb_factors must not be empty");
  const int64_t burn_in = BurnInOrDefault(o, max_length);
  if (burn_in < 0 || burn_in >= max_length) {
    return absl::InvalidArgumentError(absl::StrCat("searcher.burn_in_period must be at least 0 and less than ",
                                                   "searcher.max_length (", max_length, ") for pbt, got ", burn_in,
                                                   ": no round would exploit"));
  }
  for (size_t i = 0; i < o.explore.size(); ++i) {
    auto hp = config.hyperparameters.find(o.explore[i]);
    if (hp == config.hyperparameters.end()) {
      return absl::InvalidArgumentError(absl::StrCat("searcher.explore[", i, "]: '", o.explore[i],
                                                     "' is not a hyperparameter of this experiment"));
    }
    if (!IsSearched(hp->second)) {
      return absl::InvalidArgumentError(absl::StrCat("searcher.explore[", i, "]: '", o.explore[i], "' is a ",
                                                     hp->second.type == Hyperparameter::Type::kConst
                                                         ? "const hyperparameter"
                                                         : "nested hyperparameter of consts only",
                                                     "; pbt explores search ones"));
    }
  }
  PbtOptions resolved = o;
  resolved.burn_in_period = burn_in;
  return std::unique_ptr<SearchMethod>(std::make_unique<PbtSearch>(config.hyperparameters, std::move(resolved),
                                                                   max_length, config.searcher.smaller_is_better));
}

}  // namespace master
}  // namespace det
