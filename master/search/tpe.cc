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

// The search hparams of `space`, in order.
std::vector<Leaf> LeavesOf(const HyperparameterSpace& space) {
  std::vector<Leaf> leaves;
  std::vector<std::string> prefix;
  Leaves(space, &prefix, &leaves);
  return leaves;
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

// The widths of the kernels centred at `sorted` (ascending, the prior's
// centre among them) in [lo, hi]: each the larger gap to its neighbours (or
// to a bound), clamped to [range / min(100, n + 1), range].
std::vector<double> GapWidths(const std::vector<double>& sorted, double lo, double hi) {
  const double range = std::max(hi - lo, 1e-12);
  const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(sorted.size()));
  std::vector<double> widths;
  for (size_t i = 0; i < sorted.size(); ++i) {
    double left = sorted[i] - (i > 0 ? sorted[i - 1] : lo);
    double right = (i + 1 < sorted.size() ? sorted[i + 1] : hi) - sorted[i];
    widths.push_back(std::clamp(std::max(left, right), min_sigma, range));
  }
  return widths;
}

// A draw of N(m, s) within [lo, hi] (by rejection; m itself after 32 tries).
double SampleTruncated(double m, double s, double lo, double hi, std::mt19937_64& rng) {
  for (int attempt = 0; attempt < 32; ++attempt) {
    double x = m + s * Normal(rng);
    if (x >= lo && x <= hi) return x;
  }
  return std::clamp(m, lo, hi);
}

// The mass of N(m, s) within [lo, hi], at least 1e-12.
double TruncatedMass(double m, double s, double lo, double hi) {
  return std::max(Phi((hi - m) / s) - Phi((lo - m) / s), 1e-12);
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
    mus_ = std::move(xs);
    mus_.push_back((lo + hi) / 2);  // the prior
    std::sort(mus_.begin(), mus_.end());
    sigmas_ = GapWidths(mus_, lo, hi);
    // The prior component is wide.
    for (size_t i = 0; i < mus_.size(); ++i) {
      if (mus_[i] == (lo + hi) / 2) {
        sigmas_[i] = std::max(hi - lo, 1e-12);
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
    return SampleTruncated(mus_[c], sigmas_[c], lo_, hi_, rng);
  }

  double LogPdf(double x) const {
    if (!weights_.empty()) return std::log(weights_[static_cast<size_t>(x)]);
    double p = 0;
    for (size_t i = 0; i < mus_.size(); ++i) {
      double s = sigmas_[i];
      double d = (x - mus_[i]) / s;
      p += std::exp(-0.5 * d * d) / (s * std::sqrt(2 * kPi) * TruncatedMass(mus_[i], s, lo_, hi_));
    }
    return std::log(std::max(p / static_cast<double>(mus_.size()), 1e-300));
  }

 private:
  const Hyperparameter& hp_;
  std::vector<double> weights_;  // categorical
  std::vector<double> mus_, sigmas_;
  double lo_ = 0, hi_ = 0;
};

// Observations in estimator space: [observation][leaf], nullopt where an
// observation has no (valid) value for the leaf.
using EncodedPoints = std::vector<std::vector<std::optional<double>>>;

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
  JointParzen(const std::vector<Leaf>& leaves, EncodedPoints points)
      : leaves_(leaves), points_(std::move(points)) {
    sigma_.assign(points_.size(), std::vector<double>(leaves.size(), 0));
    for (size_t j = 0; j < leaves.size(); ++j) {
      auto [lo, hi] = Bounds(*leaves[j].hp);
      lo_.push_back(lo);
      hi_.push_back(hi);
      // Leaf j's values, with the prior's centre (observation npos), in order.
      std::vector<std::pair<double, size_t>> xs = {{(lo + hi) / 2, std::string::npos}};
      for (size_t c = 0; c < points_.size(); ++c) {
        if (points_[c][j]) xs.emplace_back(*points_[c][j], c);
      }
      std::stable_sort(xs.begin(), xs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::vector<double> sorted;
      for (const auto& x : xs) sorted.push_back(x.first);
      const std::vector<double> widths = GapWidths(sorted, lo, hi);
      for (size_t i = 0; i < xs.size(); ++i) {
        if (xs[i].second != std::string::npos) sigma_[xs[i].second][j] = widths[i];
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
    return SampleTruncated(mu.value_or((lo_[j] + hi_[j]) / 2), s, lo_[j], hi_[j], rng);
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
    const double d = (x - m) / s;
    return -0.5 * d * d - std::log(s * std::sqrt(2 * kPi) * TruncatedMass(m, s, lo_[j], hi_[j]));
  }

  const std::vector<Leaf>& leaves_;
  EncodedPoints points_;
  std::vector<std::vector<double>> sigma_;  // [observation][leaf]
  std::vector<double> lo_, hi_;
};

// A result the model may use: its level, value (smaller is better) and hparams.
struct Ranked {
  int64_t level = 0;
  double value = 0;
  const json* hparams = nullptr;
};

std::vector<std::optional<double>> EncodeLeaves(const std::vector<Leaf>& leaves, const json& hparams) {
  std::vector<std::optional<double>> encoded;
  for (const Leaf& leaf : leaves) {
    const json* v = At(hparams, leaf.path);
    encoded.push_back(v ? Encode(*leaf.hp, *v) : std::nullopt);
  }
  return encoded;
}

// The points the model is built on, best first, and in *n_below how many of
// them form l(x): ranked by level (higher first), then value; as in BOHB only
// the results at or above the highest level that at least `enough` results
// reached are kept (lower rungs mislead where learning curves cross), at most
// kMaxTpeModelTrials of them. Requires ranked.size() >= max(enough, 2).
EncodedPoints ModelPoints(std::vector<Ranked> ranked, size_t enough, double gamma, const std::vector<Leaf>& leaves,
                          size_t* n_below) {
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.level != b.level) return a.level > b.level;
    return a.value < b.value;
  });
  while (ranked.size() > enough && ranked[enough - 1].level > ranked.back().level) {
    const int64_t lowest = ranked.back().level;
    size_t keep = ranked.size();
    while (keep > 0 && ranked[keep - 1].level == lowest) --keep;
    if (keep < enough) break;
    ranked.resize(keep);
  }
  if (ranked.size() > kMaxTpeModelTrials) ranked.resize(kMaxTpeModelTrials);
  const size_t n = ranked.size();
  *n_below = std::clamp<size_t>(static_cast<size_t>(std::ceil(gamma * static_cast<double>(n))), 1, n - 1);
  EncodedPoints points;
  for (const Ranked& r : ranked) points.push_back(EncodeLeaves(leaves, *r.hparams));
  return points;
}

// One estimator per leaf of l(x), the first n_below of `points`, and of g(x),
// the rest.
void PerLeafEstimators(const std::vector<Leaf>& leaves, const EncodedPoints& points, size_t n_below,
                       std::vector<Parzen>* below, std::vector<Parzen>* above) {
  for (size_t j = 0; j < leaves.size(); ++j) {
    std::vector<double> xb, xa;
    for (size_t i = 0; i < points.size(); ++i) {
      if (points[i][j]) (i < n_below ? xb : xa).push_back(*points[i][j]);
    }
    below->emplace_back(*leaves[j].hp, std::move(xb));
    above->emplace_back(*leaves[j].hp, std::move(xa));
  }
}

// The best of n_candidates points drawn from l(x) (built on the first n_below
// of `points`, the best-ranked) by log l(x) - log g(x) (the rest), in
// estimator space, one value per leaf.
std::vector<double> BestCandidate(const std::vector<Leaf>& leaves, const EncodedPoints& points, size_t n_below,
                                  int64_t n_candidates, std::mt19937_64& rng) {
  std::vector<Parzen> below, above;
  PerLeafEstimators(leaves, points, n_below, &below, &above);
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
std::vector<double> BestJointCandidate(const std::vector<Leaf>& leaves, const EncodedPoints& points, size_t n_below,
                                       int64_t n_candidates, std::mt19937_64& rng) {
  const JointParzen l(leaves, EncodedPoints(points.begin(), points.begin() + static_cast<ptrdiff_t>(n_below))),
      g(leaves, EncodedPoints(points.begin() + static_cast<ptrdiff_t>(n_below), points.end()));
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
  std::vector<Ranked> ranked;
  for (const auto& [id, o] : obs_) {
    if (o.scored) ranked.push_back(Ranked{o.level, o.value, &o.hparams});
  }
  const size_t enough = static_cast<size_t>(std::max<int64_t>(options_.n_startup_trials, 2));
  const double random_fraction = options_.random_fraction.value_or(0);
  if (ranked.size() < enough ||
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
  const std::vector<Leaf> leaves = LeavesOf(space_);
  size_t n_below = 0;
  const EncodedPoints points = ModelPoints(std::move(ranked), enough, options_.gamma, leaves, &n_below);
  const auto best_of = options_.multivariate.value_or(false) ? BestJointCandidate : BestCandidate;
  const std::vector<double> best = best_of(leaves, points, n_below, options_.n_ei_candidates, model_rng_);
  for (size_t j = 0; j < leaves.size() && j < best.size(); ++j) {
    Set(&point, leaves[j].path, Decode(*leaves[j].hp, best[j]));
  }
  proposal.hparams = std::move(point);
  return proposal;
}

std::vector<double> TpeSampler::ScoreAbove(int64_t level, const std::vector<const json*>& points) const {
  std::vector<Ranked> ranked;
  for (const auto& [id, o] : obs_) {
    if (o.scored && o.level > level) ranked.push_back(Ranked{o.level, o.value, &o.hparams});
  }
  const size_t enough = static_cast<size_t>(std::max<int64_t>(options_.n_startup_trials, 2));
  if (ranked.size() < enough) return {};
  const std::vector<Leaf> leaves = LeavesOf(space_);
  size_t n_below = 0;
  const EncodedPoints model = ModelPoints(std::move(ranked), enough, options_.gamma, leaves, &n_below);
  std::vector<Parzen> below, above;
  PerLeafEstimators(leaves, model, n_below, &below, &above);
  std::vector<double> scores;
  for (const json* p : points) {
    const std::vector<std::optional<double>> xs = EncodeLeaves(leaves, *p);
    double score = 0;
    for (size_t j = 0; j < leaves.size(); ++j) {
      if (xs[j]) score += below[j].LogPdf(*xs[j]) - above[j].LogPdf(*xs[j]);
    }
    scores.push_back(score);
  }
  return scores;
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

const json* TpeSampler::HParams(RequestId id) const {
  auto it = obs_.find(id);
  return it == obs_.end() ? nullptr : &it->second.hparams;
}

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
  if (!snapshot.is_array() && !snapshot.is_object()) {
    return absl::InvalidArgumentError("tpe snapshot must be an object");
  }
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
