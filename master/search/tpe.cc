#include "master/search/tpe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;
constexpr double kPi = 3.14159265358979323846;

double Uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double Normal(std::mt19937_64& rng) {
  double u1 = std::max(Uniform01(rng), 1e-300);
  double u2 = Uniform01(rng);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * kPi * u2);
}

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// A search hparam at `path` (nested keys).
struct Leaf {
  std::vector<std::string> path;
  const Hyperparameter* hp = nullptr;
};

void Leaves(const HyperparameterSpace& space, std::vector<std::string>* prefix, std::vector<Leaf>* out) {
  for (const auto& [name, hp] : space) {
    prefix->push_back(name);
    if (hp.type == Hyperparameter::Type::kObject) {
      Leaves(hp.nested, prefix, out);
    } else if (hp.type != Hyperparameter::Type::kConst) {
      out->push_back(Leaf{*prefix, &hp});
    }
    prefix->pop_back();
  }
}

const json* At(const json& point, const std::vector<std::string>& path) {
  const json* p = &point;
  for (const std::string& k : path) {
    if (!p->is_object()) return nullptr;
    auto it = p->find(k);
    if (it == p->end()) return nullptr;
    p = &*it;
  }
  return p;
}

void Set(json* point, const std::vector<std::string>& path, json value) {
  json* p = point;
  for (const std::string& k : path) p = &(*p)[k];
  *p = std::move(value);
}

// The bounds of a numeric leaf in the space the estimator works in.
std::pair<double, double> Bounds(const Hyperparameter& hp) {
  if (hp.type == Hyperparameter::Type::kInt) return {hp.minval - 0.5, hp.maxval + 0.5};
  return {hp.minval, hp.maxval};
}

// A leaf's value of `v` in estimator space: exponent for log, index for
// categorical. nullopt when it does not fit.
std::optional<double> Encode(const Hyperparameter& hp, const json& v) {
  if (hp.type == Hyperparameter::Type::kCategorical) {
    for (size_t i = 0; i < hp.vals.size(); ++i) {
      if (hp.vals[i] == v) return static_cast<double>(i);
    }
    return std::nullopt;
  }
  if (!v.is_number()) return std::nullopt;
  double x = v.get<double>();
  if (hp.type == Hyperparameter::Type::kLog) {
    if (!(x > 0)) return std::nullopt;
    x = std::log(x) / std::log(hp.base);
  }
  return x;
}

json Decode(const Hyperparameter& hp, double x) {
  switch (hp.type) {
    case Hyperparameter::Type::kCategorical:
      return hp.vals[static_cast<size_t>(x)];
    case Hyperparameter::Type::kInt:
      return static_cast<int64_t>(std::clamp(std::llround(x), static_cast<long long>(hp.minval),
                                             static_cast<long long>(hp.maxval)));
    case Hyperparameter::Type::kLog:
      return std::pow(hp.base, std::clamp(x, hp.minval, hp.maxval));
    default:
      return std::clamp(x, hp.minval, hp.maxval);
  }
}

// A Parzen estimator of one leaf from encoded observations.
class Parzen {
 public:
  Parzen(const Hyperparameter& hp, std::vector<double> xs) : hp_(hp) {
    if (hp.type == Hyperparameter::Type::kCategorical) {
      weights_.assign(hp.vals.size(), 1.0 / static_cast<double>(hp.vals.size()));  // prior
      for (double x : xs) weights_[static_cast<size_t>(x)] += 1;
      double sum = 0;
      for (double w : weights_) sum += w;
      for (double& w : weights_) w /= sum;
      return;
    }
    auto [lo, hi] = Bounds(hp);
    lo_ = lo;
    hi_ = hi;
    double range = std::max(hi - lo, 1e-12);
    mus_ = std::move(xs);
    mus_.push_back((lo + hi) / 2);  // the prior
    std::sort(mus_.begin(), mus_.end());
    const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(mus_.size()));
    for (size_t i = 0; i < mus_.size(); ++i) {
      double left = mus_[i] - (i > 0 ? mus_[i - 1] : lo);
      double right = (i + 1 < mus_.size() ? mus_[i + 1] : hi) - mus_[i];
      sigmas_.push_back(std::clamp(std::max(left, right), min_sigma, range));
    }
    // The prior component is wide.
    for (size_t i = 0; i < mus_.size(); ++i) {
      if (mus_[i] == (lo + hi) / 2) {
        sigmas_[i] = range;
        break;
      }
    }
  }

  double Sample(std::mt19937_64& rng) const {
    if (!weights_.empty()) {
      double u = Uniform01(rng), acc = 0;
      for (size_t i = 0; i < weights_.size(); ++i) {
        acc += weights_[i];
        if (u < acc) return static_cast<double>(i);
      }
      return static_cast<double>(weights_.size() - 1);
    }
    size_t c = std::min(mus_.size() - 1, static_cast<size_t>(Uniform01(rng) * static_cast<double>(mus_.size())));
    for (int attempt = 0; attempt < 32; ++attempt) {
      double x = mus_[c] + sigmas_[c] * Normal(rng);
      if (x >= lo_ && x <= hi_) return x;
    }
    return std::clamp(mus_[c], lo_, hi_);
  }

  double LogPdf(double x) const {
    if (!weights_.empty()) return std::log(weights_[static_cast<size_t>(x)]);
    double p = 0;
    for (size_t i = 0; i < mus_.size(); ++i) {
      double s = sigmas_[i];
      double z = Phi((hi_ - mus_[i]) / s) - Phi((lo_ - mus_[i]) / s);
      double d = (x - mus_[i]) / s;
      p += std::exp(-0.5 * d * d) / (s * std::sqrt(2 * kPi) * std::max(z, 1e-12));
    }
    return std::log(std::max(p / static_cast<double>(mus_.size()), 1e-300));
  }

 private:
  const Hyperparameter& hp_;
  std::vector<double> weights_;  // categorical
  std::vector<double> mus_, sigmas_;
  double lo_ = 0, hi_ = 0;
};

// Optuna's multivariate estimator: one kernel per observation over every
// leaf at once (a product of truncated Gaussians, and categorical kernels for
// categorical leaves) plus a prior kernel (the centre, a range wide), mixed
// with equal weights, so a candidate is drawn near one observation in every
// coordinate together. A numeric kernel's width in a leaf is the univariate
// estimator's for that value (the larger gap to its neighbours, the prior's
// centre included, clamped to [range / min(100, n + 2), range]), so with one
// leaf the two estimators are the same mixture. A categorical kernel keeps
// 1 + 1/n on its own category and 1/n on each other one (Optuna's prior
// weight 1). An observation without a leaf takes the prior there.
class JointParzen {
 public:
  // points[c][j]: observation c's encoded value of leaf j.
  JointParzen(const std::vector<Leaf>& leaves, std::vector<std::vector<std::optional<double>>> points)
      : leaves_(leaves), points_(std::move(points)) {
    sigma_.assign(points_.size(), std::vector<double>(leaves.size(), 0));
    for (size_t j = 0; j < leaves.size(); ++j) {
      auto [lo, hi] = Bounds(*leaves[j].hp);
      lo_.push_back(lo);
      hi_.push_back(hi);
      const double range = std::max(hi - lo, 1e-12);
      // Leaf j's values, with the prior's centre (observation npos), in order.
      std::vector<std::pair<double, size_t>> xs = {{(lo + hi) / 2, std::string::npos}};
      for (size_t c = 0; c < points_.size(); ++c) {
        if (points_[c][j]) xs.emplace_back(*points_[c][j], c);
      }
      std::stable_sort(xs.begin(), xs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(xs.size()));
      for (size_t i = 0; i < xs.size(); ++i) {
        if (xs[i].second == std::string::npos) continue;
        double left = xs[i].first - (i > 0 ? xs[i - 1].first : lo);
        double right = (i + 1 < xs.size() ? xs[i + 1].first : hi) - xs[i].first;
        sigma_[xs[i].second][j] = std::clamp(std::max(left, right), min_sigma, range);
      }
    }
  }

  std::vector<double> Sample(std::mt19937_64& rng) const {
    const size_t k = points_.size() + 1;  // component points_.size() is the prior
    const size_t c = std::min(k - 1, static_cast<size_t>(Uniform01(rng) * static_cast<double>(k)));
    std::vector<double> xs;
    for (size_t j = 0; j < leaves_.size(); ++j) xs.push_back(SampleLeaf(c, j, rng));
    return xs;
  }

  double LogPdf(const std::vector<double>& xs) const {
    std::vector<double> logs;
    for (size_t c = 0; c <= points_.size(); ++c) {
      double l = 0;
      for (size_t j = 0; j < leaves_.size(); ++j) l += LeafLogPdf(c, j, xs[j]);
      logs.push_back(l);
    }
    const double top = *std::max_element(logs.begin(), logs.end());
    double sum = 0;
    for (double l : logs) sum += std::exp(l - top);
    return top + std::log(sum / static_cast<double>(logs.size()));
  }

 private:
  bool Categorical(size_t j) const { return leaves_[j].hp->type == Hyperparameter::Type::kCategorical; }
  double OffWeight() const { return 1.0 / static_cast<double>(std::max<size_t>(points_.size(), 1)); }
  // Component c's kernel in leaf j: its centre (nullopt: the prior's) and width.
  std::pair<std::optional<double>, double> Kernel(size_t c, size_t j) const {
    std::optional<double> mu = c < points_.size() ? points_[c][j] : std::nullopt;
    return {mu, mu ? sigma_[c][j] : std::max(hi_[j] - lo_[j], 1e-12)};
  }

  double SampleLeaf(size_t c, size_t j, std::mt19937_64& rng) const {
    auto [mu, s] = Kernel(c, j);
    if (Categorical(j)) {
      const size_t k = leaves_[j].hp->vals.size();
      if (!mu) {
        return static_cast<double>(std::min(k - 1, static_cast<size_t>(Uniform01(rng) * static_cast<double>(k))));
      }
      const double off = OffWeight();
      double u = Uniform01(rng) * (1 + off * static_cast<double>(k));
      for (size_t i = 0; i < k; ++i) {
        u -= off + (static_cast<double>(i) == *mu ? 1 : 0);
        if (u < 0) return static_cast<double>(i);
      }
      return static_cast<double>(k - 1);
    }
    const double m = mu.value_or((lo_[j] + hi_[j]) / 2);
    for (int attempt = 0; attempt < 32; ++attempt) {
      double x = m + s * Normal(rng);
      if (x >= lo_[j] && x <= hi_[j]) return x;
    }
    return std::clamp(m, lo_[j], hi_[j]);
  }

  double LeafLogPdf(size_t c, size_t j, double x) const {
    auto [mu, s] = Kernel(c, j);
    if (Categorical(j)) {
      const double k = static_cast<double>(leaves_[j].hp->vals.size());
      if (!mu) return -std::log(k);
      const double off = OffWeight();
      return std::log((off + (x == *mu ? 1 : 0)) / (1 + off * k));
    }
    const double m = mu.value_or((lo_[j] + hi_[j]) / 2);
    const double z = std::max(Phi((hi_[j] - m) / s) - Phi((lo_[j] - m) / s), 1e-12);
    const double d = (x - m) / s;
    return -0.5 * d * d - std::log(s * std::sqrt(2 * kPi) * z);
  }

  const std::vector<Leaf>& leaves_;
  std::vector<std::vector<std::optional<double>>> points_;
  std::vector<std::vector<double>> sigma_;  // [observation][leaf]
  std::vector<double> lo_, hi_;
};

// The best of n_candidates points drawn from l(x) (built on the first n_below
// of `points`, the best-ranked) by log l(x) - log g(x) (the rest), in
// estimator space, one value per leaf.
std::vector<double> BestCandidate(const std::vector<Leaf>& leaves, const std::vector<const json*>& points,
                                  size_t n_below, int64_t n_candidates, std::mt19937_64& rng) {
  const size_t n = points.size();
  std::vector<Parzen> below, above;
  for (const Leaf& leaf : leaves) {
    std::vector<double> xb, xa;
    for (size_t i = 0; i < n; ++i) {
      const json* v = At(*points[i], leaf.path);
      std::optional<double> x = v ? Encode(*leaf.hp, *v) : std::nullopt;
      if (x) (i < n_below ? xb : xa).push_back(*x);
    }
    below.emplace_back(*leaf.hp, std::move(xb));
    above.emplace_back(*leaf.hp, std::move(xa));
  }
  double best_score = -std::numeric_limits<double>::infinity();
  std::vector<double> best;
  for (int64_t c = 0; c < n_candidates; ++c) {
    std::vector<double> xs;
    double score = 0;
    for (size_t j = 0; j < leaves.size(); ++j) {
      double x = below[j].Sample(rng);
      score += below[j].LogPdf(x) - above[j].LogPdf(x);
      xs.push_back(x);
    }
    if (score > best_score) {
      best_score = score;
      best = std::move(xs);
    }
  }
  return best;
}

// BestCandidate with joint estimators (multivariate: true).
std::vector<double> BestJointCandidate(const std::vector<Leaf>& leaves, const std::vector<const json*>& points,
                                       size_t n_below, int64_t n_candidates, std::mt19937_64& rng) {
  std::vector<std::vector<std::optional<double>>> below, above;
  for (size_t i = 0; i < points.size(); ++i) {
    std::vector<std::optional<double>> point;
    for (const Leaf& leaf : leaves) {
      const json* v = At(*points[i], leaf.path);
      point.push_back(v ? Encode(*leaf.hp, *v) : std::nullopt);
    }
    (i < n_below ? below : above).push_back(std::move(point));
  }
  const JointParzen l(leaves, std::move(below)), g(leaves, std::move(above));
  double best_score = -std::numeric_limits<double>::infinity();
  std::vector<double> best;
  for (int64_t c = 0; c < n_candidates; ++c) {
    std::vector<double> xs = l.Sample(rng);
    const double score = l.LogPdf(xs) - g.LogPdf(xs);
    if (score > best_score) {
      best_score = score;
      best = std::move(xs);
    }
  }
  return best;
}

}  // namespace

TpeSampler::TpeSampler(HyperparameterSpace space, TpeOptions options, bool smaller_is_better, uint64_t model_seed)
    : space_(std::move(space)), options_(options), smaller_is_better_(smaller_is_better) {
  // Mixed with a constant: a stream other than the searcher's own rng, which
  // the experiment seed seeds too.
  std::seed_seq seq{static_cast<uint32_t>(model_seed), static_cast<uint32_t>(model_seed >> 32), 0x747065u};
  model_rng_.seed(seq);
}

TpeProposal TpeSampler::Propose(std::mt19937_64& rng) {
  std::vector<std::pair<RequestId, const Obs*>> scored;
  for (const auto& [id, o] : obs_) {
    if (o.scored) scored.emplace_back(id, &o);
  }
  const size_t enough = static_cast<size_t>(std::max<int64_t>(options_.n_startup_trials, 2));
  const double random_fraction = options_.random_fraction.value_or(0);
  if (scored.size() < enough ||
      (random_fraction > 0 && std::uniform_real_distribution<double>(0, 1)(model_rng_) < random_fraction)) {
    TpeProposal random;
    random.hparams = SampleHParams(space_, rng);
    random.trial_seed = DrawTrialSeed(rng);
    return random;
  }
  TpeProposal proposal;
  proposal.from_model = true;
  json point = SampleHParams(space_, model_rng_);
  proposal.trial_seed = DrawTrialSeed(model_rng_);
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    if (a.second->level != b.second->level) return a.second->level > b.second->level;
    return a.second->value < b.second->value;
  });
  // As BOHB: the model uses only the trials that reached the highest level
  // (ASHA rung) that enough trials reached; lower rungs mislead where
  // learning curves cross.
  while (scored.size() > enough && scored[enough - 1].second->level > scored.back().second->level) {
    const int64_t lowest = scored.back().second->level;
    size_t keep = scored.size();
    while (keep > 0 && scored[keep - 1].second->level == lowest) --keep;
    if (keep < enough) break;
    scored.resize(keep);
  }
  if (scored.size() > kMaxTpeModelTrials) scored.resize(kMaxTpeModelTrials);
  const size_t n = scored.size();
  size_t n_below = static_cast<size_t>(std::ceil(options_.gamma * static_cast<double>(n)));
  n_below = std::clamp<size_t>(n_below, 1, n - 1);
  std::vector<Leaf> leaves;
  std::vector<std::string> prefix;
  Leaves(space_, &prefix, &leaves);
  std::vector<const json*> points;
  for (const auto& [id, o] : scored) points.push_back(&o->hparams);
  const std::vector<double> best =
      options_.multivariate.value_or(false) ? BestJointCandidate(leaves, points, n_below, options_.n_ei_candidates, model_rng_)
                            : BestCandidate(leaves, points, n_below, options_.n_ei_candidates, model_rng_);
  for (size_t j = 0; j < leaves.size() && j < best.size(); ++j) Set(&point, leaves[j].path, Decode(*leaves[j].hp, best[j]));
  proposal.hparams = std::move(point);
  return proposal;
}

void TpeSampler::ProposeFor(CreateTrialOp* create, std::mt19937_64& rng) {
  TpeProposal p = Propose(rng);
  create->hparams = std::move(p.hparams);
  create->trial_seed = p.trial_seed;
  Record(create->request_id, create->hparams);
}

void TpeSampler::Record(RequestId id, const json& hparams) {
  Obs o;
  o.hparams = hparams;
  obs_[id] = std::move(o);
}

void TpeSampler::Observe(RequestId id, double metric, int64_t level) {
  auto it = obs_.find(id);
  if (it == obs_.end()) return;
  Obs& o = it->second;
  if (o.scored && level < o.level) return;
  double v = smaller_is_better_ ? metric : -metric;
  o.value = std::isfinite(v) ? v : std::numeric_limits<double>::infinity();
  o.level = level;
  o.scored = true;
}

void TpeSampler::Forget(RequestId id) { obs_.erase(id); }

int64_t TpeSampler::observed() const {
  return std::count_if(obs_.begin(), obs_.end(), [](const auto& o) { return o.second.scored; });
}

json TpeSampler::Snapshot() const {
  json list = json::array();
  for (const auto& [id, o] : obs_) {
    json v = std::isfinite(o.value) ? json(o.value) : json(nullptr);
    list.push_back(json{{"id", id}, {"hparams", o.hparams}, {"scored", o.scored}, {"value", v}, {"level", o.level}});
  }
  std::ostringstream rng;
  rng << model_rng_;
  return json{{"trials", std::move(list)}, {"model_rng", rng.str()}};
}

absl::Status TpeSampler::Restore(const json& snapshot) {
  if (!snapshot.is_array() && !snapshot.is_object()) return absl::InvalidArgumentError("tpe snapshot must be an object");
  std::map<RequestId, Obs> obs;
  std::mt19937_64 model_rng = model_rng_;
  try {
    if (snapshot.is_object()) {
      std::istringstream rng(snapshot.at("model_rng").get<std::string>());
      rng >> model_rng;
      if (rng.fail()) return absl::InvalidArgumentError("tpe snapshot has a malformed model_rng");
    }
    const json& trials = snapshot.is_object() ? snapshot.at("trials") : snapshot;
    if (!trials.is_array()) return absl::InvalidArgumentError("tpe snapshot's trials must be a list");
    for (const json& e : trials) {
      Obs o;
      o.hparams = e.at("hparams");
      o.scored = e.at("scored").get<bool>();
      o.value = e.at("value").is_null() ? std::numeric_limits<double>::infinity() : e.at("value").get<double>();
      o.level = e.at("level").get<int64_t>();
      obs[e.at("id").get<RequestId>()] = std::move(o);
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tpe snapshot: ", e.what()));
  }
  obs_ = std::move(obs);
  model_rng_ = model_rng;
  return absl::OkStatus();
}

}  // namespace master
}  // namespace det
