#include "master/search/searcher.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hparams.h"
#include "master/search/asha.h"
#include "master/search/pbt.h"
#include "master/search/tpe.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;

absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// single, random and grid: a fixed number of trials, each trained to
// max_length and validated once, at most `concurrency` open at a time.
class FixedPoolSearch final : public SearchMethod {
 public:
  // `grid`: the points for grid search (empty: sample with the rng).
  FixedPoolSearch(std::string name, HyperparameterSpace space, int64_t max_length, int64_t total,
                  int64_t concurrency, std::vector<json> grid, bool replace_invalid,
                  std::optional<TpeSampler> tpe = std::nullopt)
      : name_(std::move(name)),
        space_(std::move(space)),
        max_length_(max_length),
        total_(total),
        concurrency_(concurrency),
        grid_(std::move(grid)),
        replace_invalid_(replace_invalid),
        tpe_(std::move(tpe)) {}

  std::vector<SearcherOp> InitialOperations(std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    if (initialized_) return ops;
    initialized_ = true;
    Fill(rng, &ops);
    MaybeShutdown(&ops);
    return ops;
  }

  std::vector<SearcherOp> TrialCreated(RequestId, std::mt19937_64&) override { return {}; }

  std::vector<SearcherOp> ValidationCompleted(RequestId id, double metric, int64_t length,
                                              std::mt19937_64&) override {
    std::vector<SearcherOp> ops;
    if (open_.count(id) == 0 || close_requested_.count(id) != 0 || length < max_length_) return ops;
    if (tpe_) tpe_->Observe(id, metric, 0);
    close_requested_.insert(id);
    ops.push_back(CloseTrialOp{id});
    return ops;
  }

  std::vector<SearcherOp> TrialClosed(RequestId id, std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    if (open_.erase(id) == 0) return ops;
    close_requested_.erase(id);
    ++ended_;
    Fill(rng, &ops);
    MaybeShutdown(&ops);
    return ops;
  }

  std::vector<SearcherOp> TrialExitedEarly(RequestId id, ExitedReason reason, std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    if (open_.erase(id) == 0) return ops;
    close_requested_.erase(id);
    if (tpe_) tpe_->Forget(id);
    if (reason == ExitedReason::kInvalidHp && replace_invalid_) {
      --created_;  // does not count: a fresh sample takes its place
    } else {
      ++ended_;
      if (reason == ExitedReason::kErrored) ++errored_;
    }
    Fill(rng, &ops);
    MaybeShutdown(&ops);
    return ops;
  }

  double Progress() const override {
    if (total_ <= 0) return 1;
    return std::min(1.0, static_cast<double>(ended_) / static_cast<double>(total_));
  }

  // Each open trial counts the fraction of max_length it trained (all of it
  // once its final validation asked for the close).
  double ProgressWithTraining(const std::map<RequestId, double>& trained) const override {
    if (total_ <= 0) return 1;
    double done = static_cast<double>(ended_);
    for (RequestId id : open_) {
      auto it = trained.find(id);
      if (close_requested_.count(id) != 0) {
        done += 1;
      } else if (it != trained.end() && max_length_ > 0) {
        done += std::clamp(it->second / static_cast<double>(max_length_), 0.0, 1.0);
      }
    }
    return std::min(1.0, done / static_cast<double>(total_));
  }

  json Snapshot() const override {
    return json{{"searcher", name_},
                {"total", total_},
                {"next_request_id", next_request_id_},
                {"created", created_},
                {"next_point", next_point_},
                {"ended", ended_},
                {"errored", errored_},
                {"open", std::vector<RequestId>(open_.begin(), open_.end())},
                {"close_requested", std::vector<RequestId>(close_requested_.begin(), close_requested_.end())},
                {"initialized", initialized_},
                {"shutdown", shutdown_sent_},
                {"tpe", tpe_ ? tpe_->Snapshot() : json(nullptr)}};
  }

  absl::Status Restore(const json& snapshot) override {
    try {
      if (!snapshot.is_object()) return absl::InvalidArgumentError("searcher snapshot must be an object");
      std::string name = snapshot.at("searcher").get<std::string>();
      if (name != name_) {
        return absl::InvalidArgumentError(
            absl::StrCat("searcher snapshot is of searcher '", name, "', not '", name_, "'"));
      }
      int64_t total = snapshot.at("total").get<int64_t>();
      if (total != total_) {
        return absl::InvalidArgumentError(
            absl::StrCat("searcher snapshot has ", total, " trials to run, the config ", total_));
      }
      FixedPoolSearch s = *this;
      s.next_request_id_ = snapshot.at("next_request_id").get<RequestId>();
      s.created_ = snapshot.at("created").get<int64_t>();
      s.next_point_ = snapshot.at("next_point").get<int64_t>();
      s.ended_ = snapshot.at("ended").get<int64_t>();
      s.errored_ = snapshot.at("errored").get<int64_t>();
      auto open = snapshot.at("open").get<std::vector<RequestId>>();
      auto closing = snapshot.at("close_requested").get<std::vector<RequestId>>();
      s.open_ = std::set<RequestId>(open.begin(), open.end());
      s.close_requested_ = std::set<RequestId>(closing.begin(), closing.end());
      s.initialized_ = snapshot.at("initialized").get<bool>();
      s.shutdown_sent_ = snapshot.at("shutdown").get<bool>();
      if (s.next_request_id_ < 1 || s.created_ < 0 || s.ended_ < 0 || s.errored_ < 0 || s.errored_ > s.ended_ ||
          s.next_point_ < 0 || (!grid_.empty() && s.next_point_ > static_cast<int64_t>(grid_.size()))) {
        return absl::InvalidArgumentError("searcher snapshot has inconsistent counters");
      }
      if (s.tpe_ && snapshot.contains("tpe")) {
        if (absl::Status st = s.tpe_->Restore(snapshot.at("tpe")); !st.ok()) return st;
      }
      for (RequestId id : s.close_requested_) {
        if (s.open_.count(id) == 0) {
          return absl::InvalidArgumentError(absl::StrCat("searcher snapshot closes trial ", id, " that is not open"));
        }
      }
      *this = std::move(s);
      return absl::OkStatus();
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("malformed searcher snapshot: ", e.what()));
    }
  }

 private:
  FixedPoolSearch(const FixedPoolSearch&) = default;
  FixedPoolSearch& operator=(FixedPoolSearch&&) = default;

  // Creates trials while fewer than total_ count and concurrency allows.
  void Fill(std::mt19937_64& rng, std::vector<SearcherOp>* ops) {
    while (created_ < total_ && (concurrency_ <= 0 || static_cast<int64_t>(open_.size()) < concurrency_)) {
      CreateTrialOp create;
      create.request_id = next_request_id_++;
      if (tpe_) {
        tpe_->ProposeFor(&create, rng);
      } else {
        create.hparams = grid_.empty() ? SampleHParams(space_, rng) : grid_[static_cast<size_t>(next_point_++)];
        create.trial_seed = DrawTrialSeed(rng);
      }
      ++created_;
      open_.insert(create.request_id);
      RequestId id = create.request_id;
      ops->push_back(std::move(create));
      ops->push_back(ValidateAfterOp{id, max_length_});
    }
  }

  void MaybeShutdown(std::vector<SearcherOp>* ops) {
    if (shutdown_sent_ || ended_ < total_ || !open_.empty()) return;
    shutdown_sent_ = true;
    ops->push_back(ShutdownOp{ended_ > 0 && errored_ == ended_});
  }

  std::string name_;
  HyperparameterSpace space_;
  int64_t max_length_;
  int64_t total_;
  int64_t concurrency_;  // <= 0: no limit
  std::vector<json> grid_;
  bool replace_invalid_;
  std::optional<TpeSampler> tpe_;  // tpe: proposals instead of random samples

  RequestId next_request_id_ = 1;
  int64_t created_ = 0;     // trials created that count toward total_
  int64_t next_point_ = 0;  // grid: the next point to use
  int64_t ended_ = 0;       // counted trials closed or exited early
  int64_t errored_ = 0;     // of those, exited with kErrored
  std::set<RequestId> open_;
  std::set<RequestId> close_requested_;
  bool initialized_ = false;
  bool shutdown_sent_ = false;
};

const char* StateName(Searcher::TrialState s) {
  switch (s) {
    case Searcher::TrialState::kCreating:
      return "creating";
    case Searcher::TrialState::kRunning:
      return "running";
    case Searcher::TrialState::kClosing:
      return "closing";
    case Searcher::TrialState::kEnded:
      return "ended";
  }
  return "ended";
}

absl::StatusOr<Searcher::TrialState> ParseState(const std::string& s) {
  if (s == "creating") return Searcher::TrialState::kCreating;
  if (s == "running") return Searcher::TrialState::kRunning;
  if (s == "closing") return Searcher::TrialState::kClosing;
  if (s == "ended") return Searcher::TrialState::kEnded;
  return absl::InvalidArgumentError(absl::StrCat("searcher snapshot has unknown trial state '", s, "'"));
}

}  // namespace

bool operator==(const CreateTrialOp& a, const CreateTrialOp& b) {
  return a.request_id == b.request_id && a.hparams == b.hparams && a.trial_seed == b.trial_seed &&
         a.parent == b.parent;
}
bool operator==(const ValidateAfterOp& a, const ValidateAfterOp& b) {
  return a.request_id == b.request_id && a.length == b.length;
}
bool operator==(const CloseTrialOp& a, const CloseTrialOp& b) { return a.request_id == b.request_id; }
bool operator==(const ShutdownOp& a, const ShutdownOp& b) { return a.failure == b.failure; }

std::string ToString(const SearcherOp& op) {
  if (const auto* c = std::get_if<CreateTrialOp>(&op)) {
    return absl::StrCat("Create(", c->request_id, ", seed=", c->trial_seed, ", ", c->hparams.dump(),
                        c->parent != 0 ? absl::StrCat(", parent=", c->parent) : "", ")");
  }
  if (const auto* v = std::get_if<ValidateAfterOp>(&op)) {
    return absl::StrCat("ValidateAfter(", v->request_id, ", ", v->length, ")");
  }
  if (const auto* c = std::get_if<CloseTrialOp>(&op)) return absl::StrCat("Close(", c->request_id, ")");
  return std::get<ShutdownOp>(op).failure ? "Shutdown(failure)" : "Shutdown";
}

absl::StatusOr<std::unique_ptr<SearchMethod>> NewSearchMethod(const ExperimentConfig& config,
                                                              int64_t max_length) {
  const SearcherConfig& sc = config.searcher;
  std::string name(SearcherNameToString(sc.name));
  if (max_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the searcher length (searcher.max_length or max_time) must be at least 1, got ", max_length));
  }
  if (sc.max_concurrent_trials < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("searcher.max_concurrent_trials must be >= 0, got ", sc.max_concurrent_trials));
  }
  switch (sc.name) {
    case SearcherName::kSingle: {
      return std::unique_ptr<SearchMethod>(std::make_unique<FixedPoolSearch>(
          name, config.hyperparameters, max_length, 1, 1, std::vector<json>{}, true));
    }
    case SearcherName::kRandom: {
      if (sc.max_trials < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("searcher.max_trials must be at least 1 for random search, got ", sc.max_trials));
      }
      return std::unique_ptr<SearchMethod>(std::make_unique<FixedPoolSearch>(
          name, config.hyperparameters, max_length, sc.max_trials, sc.max_concurrent_trials,
          std::vector<json>{}, true));
    }
    case SearcherName::kGrid: {
      absl::StatusOr<std::vector<json>> points = GridHParams(config.hyperparameters);
      if (!points.ok()) return points.status();
      if (points->empty()) return absl::InvalidArgumentError("grid search has no points");
      int64_t total = static_cast<int64_t>(points->size());
      if (sc.max_trials > 0 && sc.max_trials < total) {
        total = sc.max_trials;
        points->resize(static_cast<size_t>(total));
      }
      return std::unique_ptr<SearchMethod>(std::make_unique<FixedPoolSearch>(
          name, config.hyperparameters, max_length, total, sc.max_concurrent_trials, std::move(*points),
          false));
    }
    case SearcherName::kTpe: {
      if (sc.max_trials < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("searcher.max_trials must be at least 1 for tpe, got ", sc.max_trials));
      }
      int64_t concurrency = sc.max_concurrent_trials > 0 ? sc.max_concurrent_trials : 4;
      TpeOptions tpe = sc.options.tpe;
      tpe.multivariate = MultivariateOrDefault(tpe, /*under_asha=*/false);
      return std::unique_ptr<SearchMethod>(std::make_unique<FixedPoolSearch>(
          name, config.hyperparameters, max_length, sc.max_trials, concurrency, std::vector<json>{}, true,
          TpeSampler(config.hyperparameters, tpe, sc.smaller_is_better,
                     config.reproducibility.experiment_seed.value_or(0))));
    }
    case SearcherName::kPbt:
      return NewPbtSearch(config, max_length);
    case SearcherName::kAdaptiveAsha:
    case SearcherName::kAsyncHalving: {
      absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, max_length);
      if (!layout.ok()) return layout.status();
      return NewAshaSearch(config, std::move(*layout));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown searcher '", View(SearcherNameToString(sc.name)), "'"));
}

// ---------------------------------------------------------------------------
// Searcher

Searcher::Searcher(std::unique_ptr<SearchMethod> method, uint64_t seed) : method_(std::move(method)), rng_(seed) {}

absl::StatusOr<Searcher> Searcher::Create(const ExperimentConfig& config, int64_t max_length) {
  absl::StatusOr<std::unique_ptr<SearchMethod>> method = NewSearchMethod(config, max_length);
  if (!method.ok()) return method.status();
  return Searcher(std::move(*method), config.reproducibility.experiment_seed.value_or(0));
}

absl::StatusOr<Searcher> Searcher::Restore(const ExperimentConfig& config, int64_t max_length,
                                           const json& snapshot) {
  absl::StatusOr<Searcher> s = Create(config, max_length);
  if (!s.ok()) return s.status();
  try {
    if (!snapshot.is_object()) return absl::InvalidArgumentError("searcher snapshot must be an object");
    std::istringstream rng_state(snapshot.at("rng").get<std::string>());
    rng_state >> s->rng_;
    if (rng_state.fail()) return absl::InvalidArgumentError("searcher snapshot has a malformed rng state");
    s->trials_.clear();
    for (const json& t : snapshot.at("trials")) {
      absl::StatusOr<TrialState> state = ParseState(t.at(1).get<std::string>());
      if (!state.ok()) return state.status();
      s->trials_[t.at(0).get<RequestId>()] = *state;
    }
    s->initialized_ = snapshot.at("initialized").get<bool>();
    s->shutdown_ = snapshot.at("shutdown").get<bool>();
    absl::Status st = s->method_->Restore(snapshot.at("method"));
    if (!st.ok()) return st;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed searcher snapshot: ", e.what()));
  }
  return s;
}

json Searcher::Snapshot() const {
  std::ostringstream rng_state;
  rng_state << rng_;
  json trials = json::array();
  for (const auto& [id, state] : trials_) trials.push_back(json::array({id, StateName(state)}));
  return json{{"rng", rng_state.str()},
              {"method", method_->Snapshot()},
              {"trials", std::move(trials)},
              {"initialized", initialized_},
              {"shutdown", shutdown_}};
}

bool Searcher::Live(RequestId id) const {
  auto it = trials_.find(id);
  return it != trials_.end() && it->second != TrialState::kEnded;
}

std::vector<SearcherOp> Searcher::Track(std::vector<SearcherOp> ops) {
  for (const SearcherOp& op : ops) {
    if (const auto* c = std::get_if<CreateTrialOp>(&op)) {
      trials_[c->request_id] = TrialState::kCreating;
    } else if (const auto* c = std::get_if<CloseTrialOp>(&op)) {
      auto it = trials_.find(c->request_id);
      if (it != trials_.end() && it->second != TrialState::kEnded) it->second = TrialState::kClosing;
    } else if (std::holds_alternative<ShutdownOp>(op)) {
      shutdown_ = true;
    }
  }
  return ops;
}

std::vector<SearcherOp> Searcher::InitialOperations() {
  if (initialized_) return {};
  initialized_ = true;
  return Track(method_->InitialOperations(rng_));
}

std::vector<SearcherOp> Searcher::TrialCreated(RequestId id) {
  if (!Live(id)) return {};
  if (trials_[id] == TrialState::kCreating) trials_[id] = TrialState::kRunning;
  return Track(method_->TrialCreated(id, rng_));
}

std::vector<SearcherOp> Searcher::ValidationCompleted(RequestId id, double metric, int64_t length) {
  if (!Live(id)) return {};
  if (trials_[id] == TrialState::kCreating) trials_[id] = TrialState::kRunning;
  return Track(method_->ValidationCompleted(id, metric, length, rng_));
}

std::vector<SearcherOp> Searcher::TrialClosed(RequestId id) {
  if (!Live(id)) return {};
  trials_[id] = TrialState::kEnded;
  return Track(method_->TrialClosed(id, rng_));
}

std::vector<SearcherOp> Searcher::TrialExitedEarly(RequestId id, ExitedReason reason) {
  if (!Live(id)) return {};
  trials_[id] = TrialState::kEnded;
  return Track(method_->TrialExitedEarly(id, reason, rng_));
}

double Searcher::Progress() const { return method_->Progress(); }

double Searcher::ProgressWithTraining(const std::map<RequestId, double>& trained) const {
  return method_->ProgressWithTraining(trained);
}

int64_t Searcher::TrialBracket(RequestId id) const { return method_->TrialBracket(id); }

int64_t Searcher::ended_trials() const {
  return std::count_if(trials_.begin(), trials_.end(),
                       [](const auto& t) { return t.second == TrialState::kEnded; });
}

}  // namespace master
}  // namespace det
