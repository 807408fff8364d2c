#include "bench/search_tasks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/bounded_file.h"
#include "common/hparams.h"
#include "master/search/searcher.h"

namespace det {
namespace bench {

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double Normal(std::mt19937_64& rng) {
  double u1 = std::max(Uniform(rng), 1e-300);
  double u2 = Uniform(rng);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

Dynamics DynamicsOf(const std::string& task, const nlohmann::json& hp) {
  double x = std::log10(hp.at("lr").get<double>());
  Dynamics d;
  if (task == "schedule") {
    d.a = 0.95 - 0.04 * (x + 4) - 0.3 * std::max(0.0, x + 0.7);
    d.tau = std::max(1.0, 20 * std::pow(10.0, -0.8 * (x + 1)));
    return d;
  }
  d.tau = std::max(1.0, 4 * std::pow(10.0, -0.5 * (x + 1)));
  if (task == "lr") {
    d.a = 0.70 + 0.20 * std::exp(-std::pow(x + 2.5, 2) / 2.0) - 0.3 * std::max(0.0, x + 0.5);
    return d;
  }
  double wd = std::log10(hp.at("wd").get<double>());
  double w = std::log2(hp.at("width").get<double>());
  double good = std::exp(-(std::pow(x + 2.2, 2) / 0.3 + std::pow(wd + 4.2, 2) / 0.8 + std::pow(w - 7.5, 2) / 2.0));
  d.a = 0.62 + 0.30 * good - 0.3 * std::max(0.0, x + 0.5);
  return d;
}

double TrialLuck(uint64_t trial_seed, double seed_noise) {
  std::mt19937_64 luck(0x5eedull * 0x9e3779b97f4a7c15ull + trial_seed);
  return seed_noise * Normal(luck);
}

uint64_t NoiseKey(const nlohmann::json& hparams, uint64_t trial_seed) {
  return std::hash<std::string>()(hparams.dump()) ^ (trial_seed << 17);
}

double ValidationNoiseSd(int64_t length) { return 0.003 + 0.03 * std::exp(-static_cast<double>(length) / 64); }

double ValidationNoise(uint64_t key, int64_t length) {
  std::mt19937_64 fixed(key * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(length));
  return ValidationNoiseSd(length) * Normal(fixed);
}

const char* KindName(Dimension::Kind kind) {
  switch (kind) {
    case Dimension::Kind::kLog: return "log";
    case Dimension::Kind::kInt: return "int";
    case Dimension::Kind::kDouble: return "double";
    case Dimension::Kind::kIndex: return "index";
  }
  return "?";
}

double NearestRankQuantile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  return values[std::min(values.size(), std::max<size_t>(rank, 1)) - 1];
}

namespace {

// The value of dimension `d` in `hp`, checked against its bounds.
absl::StatusOr<double> DimensionValue(const nlohmann::json& hp, const Dimension& d) {
  auto it = hp.find(d.name);
  if (it == hp.end() || !it->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("hparams: field '", d.name, "' is missing or not a number"));
  }
  double v = it->get<double>();
  bool integral = d.kind == Dimension::Kind::kInt || d.kind == Dimension::Kind::kIndex;
  double slack = integral ? 0 : 1e-9 * std::max(1.0, std::fabs(d.high));
  if (!std::isfinite(v) || v < d.low - slack || v > d.high + slack || (integral && v != std::floor(v))) {
    return absl::InvalidArgumentError(absl::StrFormat("hparams: field '%s' = %g is outside [%g, %g]%s", d.name, v,
                                                      d.low, d.high, integral ? " or not an integer" : ""));
  }
  return v;
}

class SimulatedTask : public SearchTask {
 public:
  explicit SimulatedTask(std::string name) : name_(std::move(name)) {
    space_.push_back({"lr", Dimension::Kind::kLog, 1e-4, 1.0});
    if (name_ == "rare") {
      space_.push_back({"wd", Dimension::Kind::kLog, 1e-6, 1e-1});
      space_.push_back({"width", Dimension::Kind::kInt, 16, 512});
    }
    ComputeTarget();
  }
  const std::string& name() const override { return name_; }
  const SearchSpace& space() const override { return space_; }
  ExperimentConfig BaseConfig() const override {
    ExperimentConfig c;
    c.hyperparameters["lr"] = Hyperparameter::Log(-4, 0);
    if (name_ == "rare") {
      c.hyperparameters["wd"] = Hyperparameter::Log(-6, -1);
      c.hyperparameters["width"] = Hyperparameter::Int(16, 512);
    }
    c.searcher.metric = "accuracy";
    c.searcher.smaller_is_better = false;
    c.searcher.max_length = Length{Length::Unit::kBatches, kTaskMaxLength};
    return c;
  }
  absl::StatusOr<TrialState> Start(const nlohmann::json& hparams, uint64_t trial_seed) const override {
    for (const Dimension& d : space_) {
      if (auto v = DimensionValue(hparams, d); !v.ok()) return v.status();
    }
    TrialState s;
    s.d = DynamicsOf(name_, hparams);
    s.d.a += TrialLuck(trial_seed, kTaskSeedNoise);
    s.key = NoiseKey(hparams, trial_seed);
    return s;
  }
  void Train(TrialState& s, int64_t to_length) const override {
    for (; s.trained < to_length; ++s.trained) s.q += (s.d.a - s.q) / s.d.tau;
  }
  absl::StatusOr<double> Validate(const TrialState& s) const override {
    return s.q + ValidationNoise(s.key, s.trained);
  }
  absl::StatusOr<TrialState> Fork(const TrialState& parent, const nlohmann::json& hparams,
                                  uint64_t child_seed) const override {
    absl::StatusOr<TrialState> s = Start(hparams, child_seed);
    if (!s.ok()) return s.status();
    s->q = parent.q;
    s->trained = parent.trained;
    return s;
  }
  double Target() const override { return target_; }
  std::string TargetHow() const override { return how_; }

 private:
  // The 98th percentile (nearest rank) of the final validation of 10,000
  // random configurations, each drawn as random search draws a trial
  // (SampleHParams, then DrawTrialSeed) from one fixed rng.
  void ComputeTarget() {
    ExperimentConfig c = BaseConfig();
    std::mt19937_64 rng(51);
    std::vector<double> finals;
    for (int i = 0; i < 10000; ++i) {
      nlohmann::json hp = SampleHParams(c.hyperparameters, rng);
      uint32_t seed = master::DrawTrialSeed(rng);
      TrialState s = *Start(hp, seed);
      Train(s, kTaskMaxLength);
      finals.push_back(*Validate(s));
    }
    target_ = NearestRankQuantile(finals, 0.98);
    how_ = absl::StrFormat(
        "the 98th percentile (nearest rank) of the validation at %d batches of 10,000 random configurations "
        "(drawn as random search draws trials, rng seed 51, each with its own trial seed; seed noise %.3f)",
        kTaskMaxLength, kTaskSeedNoise);
  }

  std::string name_;
  SearchSpace space_;
  double target_ = 0;
  std::string how_;
};

struct Table {
  std::string name;
  std::vector<int64_t> lengths;
  std::vector<std::pair<std::string, int64_t>> axes;  // name, number of values
  int64_t seeds = 0;
  int64_t points = 0;
  std::vector<double> values;  // [(point * seeds + seed) * lengths + j]
};

class TableTask : public SearchTask {
 public:
  TableTask(Table t, const std::string& path) : t_(std::move(t)) {
    for (const auto& [axis, n] : t_.axes) space_.push_back({axis, Dimension::Kind::kIndex, 0, double(n - 1)});
    std::vector<double> finals;
    for (int64_t i = 0; i < t_.points * t_.seeds; ++i) finals.push_back(t_.values[(i + 1) * t_.lengths.size() - 1]);
    target_ = NearestRankQuantile(finals, 0.98);
    how_ = absl::StrFormat("the 98th percentile (nearest rank) of the %d values at %d batches in %s (%d points x %d "
                           "seeds)",
                           finals.size(), t_.lengths.back(), path, t_.points, t_.seeds);
  }
  const std::string& name() const override { return t_.name; }
  const SearchSpace& space() const override { return space_; }
  ExperimentConfig BaseConfig() const override {
    ExperimentConfig c;
    for (const auto& [axis, n] : t_.axes) c.hyperparameters[axis] = Hyperparameter::Int(0, n - 1);
    c.searcher.metric = "accuracy";
    c.searcher.smaller_is_better = false;
    c.searcher.max_length = Length{Length::Unit::kBatches, kTaskMaxLength};
    return c;
  }
  absl::StatusOr<TrialState> Start(const nlohmann::json& hparams, uint64_t trial_seed) const override {
    TrialState s;
    for (size_t i = 0; i < space_.size(); ++i) {
      absl::StatusOr<double> v = DimensionValue(hparams, space_[i]);
      if (!v.ok()) return v.status();
      s.point = s.point * t_.axes[i].second + static_cast<int64_t>(*v);
    }
    s.seed = static_cast<int64_t>(trial_seed % static_cast<uint64_t>(t_.seeds));
    return s;
  }
  void Train(TrialState& s, int64_t to_length) const override { s.trained = std::max(s.trained, to_length); }
  absl::StatusOr<double> Validate(const TrialState& s) const override {
    auto it = std::upper_bound(t_.lengths.begin(), t_.lengths.end(), s.trained);
    if (it == t_.lengths.begin()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "table task %s: a validation at %d batches, before the first recorded length %d", t_.name, s.trained,
          t_.lengths.front()));
    }
    size_t j = static_cast<size_t>(it - t_.lengths.begin()) - 1;
    return t_.values[static_cast<size_t>(s.point * t_.seeds + s.seed) * t_.lengths.size() + j];
  }
  absl::StatusOr<TrialState> Fork(const TrialState& parent, const nlohmann::json& hparams,
                                  uint64_t child_seed) const override {
    absl::StatusOr<TrialState> s = Start(hparams, child_seed);
    if (!s.ok()) return s.status();
    s->trained = parent.trained;
    return s;
  }
  double Target() const override { return target_; }
  std::string TargetHow() const override { return how_; }

 private:
  Table t_;
  SearchSpace space_;
  double target_ = 0;
  std::string how_;
};

// An integer field of the table, in [lo, hi].
absl::StatusOr<int64_t> TableInt(const nlohmann::json& j, const std::string& field, int64_t lo, int64_t hi) {
  if (!j.is_number_integer() || j.get<int64_t>() < lo || j.get<int64_t>() > hi) {
    return absl::InvalidArgumentError(absl::StrFormat("field '%s' must be an integer in [%d, %d]", field, lo, hi));
  }
  return j.get<int64_t>();
}

// The header of a table file (everything but the rows).
absl::Status ParseTableHeader(const nlohmann::json& j, Table& t) {
  if (!j.is_object()) return absl::InvalidArgumentError("the file must hold one JSON object");
  if (!j.contains("task") || !j["task"].is_string() || j["task"].get<std::string>().empty() ||
      j["task"].get<std::string>().size() > 64) {
    return absl::InvalidArgumentError("field 'task' must be a name of 1..64 characters");
  }
  t.name = j["task"].get<std::string>();
  if (!j.contains("smaller_is_better") || j["smaller_is_better"] != false) {
    return absl::InvalidArgumentError("field 'smaller_is_better' must be false (the metric is maximized)");
  }
  const nlohmann::json& lengths = j.value("lengths", nlohmann::json());
  if (!lengths.is_array() || lengths.empty() || lengths.size() > 64) {
    return absl::InvalidArgumentError("field 'lengths' must be an array of 1..64 lengths");
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    absl::StatusOr<int64_t> len = TableInt(lengths[i], absl::StrCat("lengths[", i, "]"), 16, kTaskMaxLength);
    if (!len.ok()) return len.status();
    if (*len != 16 * static_cast<int64_t>(i + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field 'lengths[", i, "]' = ", *len, ": lengths must be every multiple of 16 from 16 to 256 (16, 32, ..., 256), the lengths a search validates at"));
    }
    t.lengths.push_back(*len);
  }
  if (t.lengths.back() != kTaskMaxLength) {
    return absl::InvalidArgumentError(absl::StrCat("field 'lengths' must end at ", kTaskMaxLength));
  }
  const nlohmann::json& axes = j.value("axes", nlohmann::json());
  if (!axes.is_array() || axes.empty() || static_cast<int64_t>(axes.size()) > kMaxTableAxes) {
    return absl::InvalidArgumentError(absl::StrCat("field 'axes' must be an array of 1..", kMaxTableAxes, " axes"));
  }
  t.points = 1;
  std::set<std::string> names;
  for (size_t i = 0; i < axes.size(); ++i) {
    const nlohmann::json& a = axes[i];
    std::string f = absl::StrCat("axes[", i, "]");
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string() || a["name"].get<std::string>().empty() ||
        a["name"].get<std::string>().size() > 64 || !names.insert(a["name"].get<std::string>()).second) {
      return absl::InvalidArgumentError(absl::StrCat("field '", f, ".name' must be a unique name of 1..64 characters"));
    }
    if (!a.contains("values") || !a["values"].is_array() || a["values"].empty() ||
        static_cast<int64_t>(a["values"].size()) > kMaxAxisValues) {
      return absl::InvalidArgumentError(absl::StrCat("field '", f, ".values' must be an array of 1..", kMaxAxisValues,
                                                     " values"));
    }
    t.axes.emplace_back(a["name"].get<std::string>(), static_cast<int64_t>(a["values"].size()));
    t.points *= static_cast<int64_t>(a["values"].size());
  }
  absl::StatusOr<int64_t> seeds = TableInt(j.value("seeds", nlohmann::json()), "seeds", 1, kMaxTableSeeds);
  if (!seeds.ok()) return seeds.status();
  t.seeds = *seeds;
  if (t.points * t.seeds > kMaxTableRows) {
    return absl::InvalidArgumentError(absl::StrCat("fields 'axes' and 'seeds': ", t.points, " points x ", t.seeds,
                                                   " seeds is more than ", kMaxTableRows, " rows"));
  }
  return absl::OkStatus();
}

// The rows: every (point, seed) exactly once, one finite value per length.
absl::Status ParseTableRows(const nlohmann::json& rows, Table& t) {
  int64_t n = t.points * t.seeds;
  if (!rows.is_array() || static_cast<int64_t>(rows.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("field 'rows' must be an array of exactly ", n,
                                                   " rows (every point of the axes' grid x every seed)"));
  }
  size_t nlen = t.lengths.size();
  t.values.assign(static_cast<size_t>(n) * nlen, 0);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (size_t r = 0; r < rows.size(); ++r) {
    const nlohmann::json& row = rows[r];
    std::string f = absl::StrCat("rows[", r, "]");
    if (!row.is_object() || !row.contains("point") || !row["point"].is_array() ||
        row["point"].size() != t.axes.size()) {
      return absl::InvalidArgumentError(absl::StrCat("field '", f, ".point' must be an array of one index per axis"));
    }
    int64_t point = 0;
    for (size_t i = 0; i < t.axes.size(); ++i) {
      absl::StatusOr<int64_t> idx = TableInt(row["point"][i], absl::StrCat(f, ".point[", i, "]"), 0,
                                             t.axes[i].second - 1);
      if (!idx.ok()) return idx.status();
      point = point * t.axes[i].second + *idx;
    }
    absl::StatusOr<int64_t> seed = TableInt(row.value("seed", nlohmann::json()), f + ".seed", 0, t.seeds - 1);
    if (!seed.ok()) return seed.status();
    size_t at = static_cast<size_t>(point * t.seeds + *seed);
    if (seen[at]) return absl::InvalidArgumentError(absl::StrCat("field '", f, "': its point and seed appear twice"));
    seen[at] = true;
    const nlohmann::json& v = row.value("values", nlohmann::json());
    if (!v.is_array() || v.size() != nlen) {
      return absl::InvalidArgumentError(absl::StrCat("field '", f, ".values' must hold one value per length (", nlen,
                                                     ")"));
    }
    for (size_t j = 0; j < nlen; ++j) {
      if (!v[j].is_number() || !std::isfinite(v[j].get<double>())) {
        return absl::InvalidArgumentError(absl::StrCat("field '", f, ".values[", j, "]' must be a finite number"));
      }
      t.values[at * nlen + j] = v[j].get<double>();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SearchTask>> LoadTableTask(const std::string& path) {
  std::string what = absl::StrCat("table file '", path, "'");
  absl::StatusOr<std::string> text = ReadBoundedFile(path, kMaxTableBytes, what);
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  Table t;
  absl::Status st = ParseTableHeader(j, t);
  if (st.ok()) st = ParseTableRows(j.value("rows", nlohmann::json()), t);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", st.message(),
                                                   " (format: bench/README.md, section search_peers)"));
  }
  return std::unique_ptr<SearchTask>(new TableTask(std::move(t), path));
}

absl::StatusOr<std::unique_ptr<SearchTask>> MakeSimulatedTask(const std::string& name) {
  if (name != "lr" && name != "rare") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown simulated task '", name, "' (known: lr, rare; fmnist is read from --table)"));
  }
  return std::unique_ptr<SearchTask>(new SimulatedTask(name));
}

}  // namespace bench
}  // namespace det
