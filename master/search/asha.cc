#include "master/search/asha.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/hparams.h"
#include "master/search/tpe.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;

// A result recorded in a rung. `metric` is normalized (smaller is better);
// `worst` ranks after every real result (an exited trial, a non-finite metric).
struct Entry {
  RequestId id = 0;
  double metric = 0;
  bool worst = false;
  bool promoted = false;
};

// Strictly better.
bool Better(const Entry& a, const Entry& b) {
  if (a.worst != b.worst) return !a.worst;
  if (a.worst) return false;
  return a.metric < b.metric;
}

enum class TrialState { kTraining, kWaiting, kClosing, kEnded };

const char* StateName(TrialState s) {
  switch (s) {
    case TrialState::kTraining:
      return "training";
    case TrialState::kWaiting:
      return "waiting";
    case TrialState::kClosing:
      return "closing";
    case TrialState::kEnded:
      return "ended";
  }
  return "ended";
}

bool ParseState(const std::string& s, TrialState* out) {
  for (TrialState st : {TrialState::kTraining, TrialState::kWaiting, TrialState::kClosing, TrialState::kEnded}) {
    if (s == StateName(st)) {
      *out = st;
      return true;
    }
  }
  return false;
}

class AshaSearch final : public SearchMethod {
 public:
  AshaSearch(std::string name, HyperparameterSpace space, AshaLayout layout, const SearchOptions& options,
             uint64_t seed)
      : name_(std::move(name)), space_(std::move(space)), layout_(std::move(layout)),
        best_so_far_(options.rung_metric == RungMetric::kBest) {
    if (options.sampler == HParamSampler::kTpe) {
      TpeOptions tpe = options.tpe;
      tpe.random_fraction = RandomFractionOrDefault(tpe, /*under_asha=*/true);
      tpe.multivariate = MultivariateOrDefault(tpe, /*under_asha=*/true);
      tpe_.emplace(space_, tpe, layout_.smaller_is_better, seed);
      random_first_bracket_ = options.tpe_brackets == TpeBrackets::kAfterFirst && layout_.brackets.size() > 1;
      model_promotions_ = ModelPromotionsOrDefault(options.model_promotions) && !layout_.stop_once;
    }
    brackets_.resize(layout_.brackets.size());
    for (size_t b = 0; b < brackets_.size(); ++b) {
      brackets_[b].rungs.resize(static_cast<size_t>(layout_.brackets[b].num_rungs));
      Recount();
      const std::vector<int64_t>& len = layout_.brackets[b].rung_lengths;
      int64_t c = layout_.brackets[b].max_trials;
      for (size_t k = 0; k < len.size(); ++k) {
        planned_batches_ += static_cast<double>(c) * static_cast<double>(len[k] - (k > 0 ? len[k - 1] : 0));
        c = AshaFloorDivPow(c, layout_.divisor, 1);
      }
    }
  }

  std::vector<SearcherOp> InitialOperations(std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    if (initialized_) return ops;
    initialized_ = true;
    // Round robin: one trial per bracket in turn while any can create.
    for (bool created = true; created;) {
      created = false;
      for (size_t b = 0; b < brackets_.size(); ++b) {
        if (CanCreate(b)) {
          Create(b, rng, &ops);
          created = true;
        }
      }
    }
    MaybeShutdown(&ops);
    return ops;
  }

  std::vector<SearcherOp> TrialCreated(RequestId, std::mt19937_64&) override { return {}; }

  std::vector<SearcherOp> ValidationCompleted(RequestId id, double metric, int64_t length,
                                              std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    auto it = trials_.find(id);
    if (it == trials_.end() || it->second.state != TrialState::kTraining) return ops;
    Trial& t = it->second;
    size_t b = t.bracket;
    double value = layout_.smaller_is_better ? metric : -metric;
    bool worst = !std::isfinite(value);
    if (worst) value = 0;
    if (best_so_far_ && !worst) {  // rung_metric: best: the trial's best validation so far
      if (t.has_best) value = std::min(value, t.best);
      t.best = value;
      t.has_best = true;
    }
    if (length < RungLength(b, t.rung)) return ops;
    // TPE's level is the batches behind the result: brackets start at
    // different lengths, so rung k of one bracket is not rung k of another.
    if (tpe_) tpe_->Observe(id, layout_.smaller_is_better ? value : -value, worst ? -1 : RungLength(b, t.rung));
    if (layout_.stop_once) {
      StopOnceReport(id, length, value, worst, &ops);
    } else {
      Record(id, t.rung, value, worst, &ops);
    }
    AfterEvent(b, rng, &ops);
    return ops;
  }

  std::vector<SearcherOp> TrialClosed(RequestId id, std::mt19937_64& rng) override {
    auto it = trials_.find(id);
    if (it == trials_.end() || it->second.state == TrialState::kEnded) return {};
    if (it->second.state == TrialState::kTraining) {
      // Not asked to close: as canceled.
      return TrialExitedEarly(id, ExitedReason::kUserCanceled, rng);
    }
    std::vector<SearcherOp> ops;
    SetTrial(it->second, TrialState::kEnded, it->second.rung);
    ++ended_;
    AfterEvent(it->second.bracket, rng, &ops);
    return ops;
  }

  std::vector<SearcherOp> TrialExitedEarly(RequestId id, ExitedReason reason, std::mt19937_64& rng) override {
    std::vector<SearcherOp> ops;
    auto it = trials_.find(id);
    if (it == trials_.end() || it->second.state == TrialState::kEnded) return ops;
    Trial& t = it->second;
    size_t b = t.bracket;
    TrialState was = t.state;
    SetTrial(t, TrialState::kEnded, t.rung);
    if (reason == ExitedReason::kInvalidHp) {
      if (tpe_) tpe_->Forget(id);
      t.invalid = true;
      --brackets_[b].created;  // does not count: a fresh sample takes its place
      std::vector<int64_t> touched;
      for (size_t k = 0; k < brackets_[b].rungs.size(); ++k) {
        std::vector<Entry>& entries = brackets_[b].rungs[k].entries;
        auto e = std::find_if(entries.begin(), entries.end(), [id](const Entry& x) { return x.id == id; });
        if (e != entries.end()) {
          entries.erase(e);
          touched.push_back(static_cast<int64_t>(k));
        }
      }
      if (!layout_.stop_once) {
        for (int64_t k : touched) {
          if (k + 1 < static_cast<int64_t>(brackets_[b].rungs.size())) {
            for (RequestId p : Promote(b, k)) Advance(p, k + 1, &ops);
          }
        }
      }
    } else {
      ++ended_;
      if (reason == ExitedReason::kErrored) ++errored_;
      if (was == TrialState::kTraining) {
        // Its rung records the worst result for it, so promotions go on.
        if (layout_.stop_once) {
          Insert(b, t.rung, Entry{id, 0, true, false}, /*ties_first=*/true);
          Credit(b, t.rung);
        } else {
          Record(id, t.rung, 0, true, &ops);
        }
      }
    }
    AfterEvent(b, rng, &ops);
    return ops;
  }

  double Progress() const override {
    if (shutdown_sent_ || planned_batches_ <= 0) return 1;
    return std::min(1.0, done_batches_ / planned_batches_);
  }

  // A trial training toward rung k adds what it trained beyond rung k - 1,
  // at most that rung's increment (the credit its validation will give).
  double ProgressWithTraining(const std::map<RequestId, double>& trained) const override {
    if (shutdown_sent_ || planned_batches_ <= 0) return 1;
    double done = done_batches_;
    for (const auto& [id, units] : trained) {
      auto it = trials_.find(id);
      if (it == trials_.end() || it->second.state != TrialState::kTraining) continue;
      const Trial& t = it->second;
      const double from = t.rung > 0 ? static_cast<double>(RungLength(t.bracket, t.rung - 1)) : 0.0;
      const double to = static_cast<double>(RungLength(t.bracket, t.rung));
      done += std::clamp(units - from, 0.0, std::max(0.0, to - from));
    }
    return std::min(1.0, done / planned_batches_);
  }

  int64_t TrialBracket(RequestId id) const override {
    auto it = trials_.find(id);
    return it == trials_.end() ? 0 : static_cast<int64_t>(it->second.bracket);
  }

  json Snapshot() const override {
    json brackets = json::array();
    for (size_t b = 0; b < brackets_.size(); ++b) {
      json rungs = json::array();
      json model_promoted = json::array();
      for (const Rung& r : brackets_[b].rungs) {
        model_promoted.push_back(r.model_promoted);
        json entries = json::array();
        for (const Entry& e : r.entries) entries.push_back(json::array({e.id, e.metric, e.worst, e.promoted}));
        rungs.push_back(std::move(entries));
      }
      const AshaBracket& lb = layout_.brackets[b];
      brackets.push_back(json{{"num_rungs", lb.num_rungs},
                              {"rung_lengths", lb.rung_lengths},
                              {"max_trials", lb.max_trials},
                              {"max_concurrent_trials", lb.max_concurrent_trials},
                              {"created", brackets_[b].created},
                              {"model_promoted", std::move(model_promoted)},
                              {"rungs", std::move(rungs)}});
    }
    json trials = json::array();
    for (const auto& [id, t] : trials_) {
      trials.push_back(json::array(
          {id, t.bracket, t.rung, StateName(t.state), t.invalid, t.has_best ? json(t.best) : json(nullptr)}));
    }
    return json{{"searcher", name_},
                {"stop_once", layout_.stop_once},
                {"brackets", std::move(brackets)},
                {"trials", std::move(trials)},
                {"next_request_id", next_request_id_},
                {"ended", ended_},
                {"errored", errored_},
                {"done_batches", done_batches_},
                {"initialized", initialized_},
                {"shutdown", shutdown_sent_},
                {"tpe", tpe_ ? tpe_->Snapshot() : json(nullptr)},
                {"tpe_level", "batches"}};
  }

  absl::Status Restore(const json& snapshot) override {
    try {
      if (!snapshot.is_object()) return absl::InvalidArgumentError("searcher snapshot must be an object");
      std::string name = snapshot.at("searcher").get<std::string>();
      if (name != name_) {
        return absl::InvalidArgumentError(
            absl::StrCat("searcher snapshot is of searcher '", name, "', not '", name_, "'"));
      }
      if (snapshot.at("stop_once").get<bool>() != layout_.stop_once) {
        return absl::InvalidArgumentError("searcher snapshot has another stop_once than the config");
      }
      const json& brackets = snapshot.at("brackets");
      if (!brackets.is_array() || brackets.size() != brackets_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("searcher snapshot has ", brackets.size(),
                                                       " brackets, the config ", brackets_.size()));
      }
      AshaSearch s = *this;
      s.trials_.clear();
      for (const json& t : snapshot.at("trials")) {
        Trial trial;
        RequestId id = t.at(0).get<RequestId>();
        int64_t bracket = t.at(1).get<int64_t>();
        trial.rung = t.at(2).get<int64_t>();
        trial.invalid = t.at(4).get<bool>();
        if (t.size() > 5 && t.at(5).is_number()) {
          trial.best = t.at(5).get<double>();
          trial.has_best = true;
        }
        if (bracket < 0 || bracket >= static_cast<int64_t>(brackets_.size()) || trial.rung < 0 ||
            trial.rung >= layout_.brackets[static_cast<size_t>(bracket)].num_rungs ||
            !ParseState(t.at(3).get<std::string>(), &trial.state) || s.trials_.count(id) != 0) {
          return absl::InvalidArgumentError(absl::StrCat("searcher snapshot has a malformed trial ", t.dump()));
        }
        trial.bracket = static_cast<size_t>(bracket);
        s.trials_[id] = trial;
      }
      for (size_t b = 0; b < brackets_.size(); ++b) {
        const json& jb = brackets.at(b);
        const AshaBracket& lb = layout_.brackets[b];
        if (jb.at("num_rungs").get<int64_t>() != lb.num_rungs ||
            jb.at("rung_lengths").get<std::vector<int64_t>>() != lb.rung_lengths ||
            jb.at("max_trials").get<int64_t>() != lb.max_trials ||
            jb.at("max_concurrent_trials").get<int64_t>() != lb.max_concurrent_trials) {
          return absl::InvalidArgumentError(absl::StrCat("searcher snapshot bracket ", b,
                                                         " does not match the config: ", jb.dump()));
        }
        s.brackets_[b].created = jb.at("created").get<int64_t>();
        if (s.brackets_[b].created < 0 || s.brackets_[b].created > lb.max_trials) {
          return absl::InvalidArgumentError("searcher snapshot has inconsistent counters");
        }
        const json& rungs = jb.at("rungs");
        if (!rungs.is_array() || static_cast<int64_t>(rungs.size()) != lb.num_rungs) {
          return absl::InvalidArgumentError("searcher snapshot has a bracket with the wrong number of rungs");
        }
        const json model_promoted = jb.value("model_promoted", json::array());
        for (size_t k = 0; k < rungs.size(); ++k) {
          s.brackets_[b].rungs[k].model_promoted = k < model_promoted.size() ? model_promoted.at(k).get<int64_t>() : 0;
          if (s.brackets_[b].rungs[k].model_promoted < 0) {
            return absl::InvalidArgumentError("searcher snapshot has inconsistent counters");
          }
          std::vector<Entry>& entries = s.brackets_[b].rungs[k].entries;
          entries.clear();
          for (const json& e : rungs.at(k)) {
            Entry entry{e.at(0).get<RequestId>(), e.at(1).get<double>(), e.at(2).get<bool>(), e.at(3).get<bool>()};
            auto t = s.trials_.find(entry.id);
            if (t == s.trials_.end() || t->second.bracket != b) {
              return absl::InvalidArgumentError(
                  absl::StrCat("searcher snapshot has a result of unknown trial ", entry.id));
            }
            entries.push_back(entry);
          }
        }
      }
      s.next_request_id_ = snapshot.at("next_request_id").get<RequestId>();
      s.ended_ = snapshot.at("ended").get<int64_t>();
      s.errored_ = snapshot.at("errored").get<int64_t>();
      s.done_batches_ = snapshot.at("done_batches").get<double>();
      s.initialized_ = snapshot.at("initialized").get<bool>();
      s.shutdown_sent_ = snapshot.at("shutdown").get<bool>();
      if (s.next_request_id_ < 1 || s.ended_ < 0 || s.errored_ < 0 || s.errored_ > s.ended_ ||
          (!s.trials_.empty() && s.trials_.rbegin()->first >= s.next_request_id_)) {
        return absl::InvalidArgumentError("searcher snapshot has inconsistent counters");
      }
      if (s.tpe_ && snapshot.contains("tpe")) {
        json tpe = snapshot.at("tpe");
        if (!snapshot.contains("tpe_level")) s.RungIndexLevelsToBatches(&tpe);
        if (absl::Status st = s.tpe_->Restore(tpe); !st.ok()) return st;
      }
      s.Recount();
      *this = std::move(s);
      return absl::OkStatus();
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("malformed searcher snapshot: ", e.what()));
    }
  }

 private:
  struct Trial {
    size_t bracket = 0;
    int64_t rung = 0;  // training toward, waiting at, or last recorded at
    TrialState state = TrialState::kTraining;
    bool invalid = false;  // exited with kInvalidHp (does not count)
    bool has_best = false;  // rung_metric best: the best normalized validation so far
    double best = 0;
  };
  struct Rung {
    std::vector<Entry> entries;  // best first
    int64_t model_promoted = 0;  // promoted by ModelPromote
  };
  struct BracketState {
    std::vector<Rung> rungs;
    int64_t created = 0;  // trials created that count toward max_trials
  };

  AshaSearch(const AshaSearch&) = default;
  AshaSearch& operator=(AshaSearch&&) = default;

  // Snapshots before "tpe_level" gave TPE the rung index as its level; the
  // index becomes the batches of that rung of the trial's bracket.
  void RungIndexLevelsToBatches(json* tpe) const {
    if (!tpe->is_array()) return;
    for (json& e : *tpe) {
      if (!e.is_object() || !e.contains("level") || !e.contains("id") || !e["level"].is_number_integer()) continue;
      auto t = trials_.find(e["id"].get<RequestId>());
      const int64_t k = e["level"].get<int64_t>();
      if (t == trials_.end() || k < 0 || k > TopRung(t->second.bracket)) continue;
      e["level"] = RungLength(t->second.bracket, k);
    }
  }

  int64_t RungLength(size_t b, int64_t k) const {
    return layout_.brackets[b].rung_lengths[static_cast<size_t>(k)];
  }
  int64_t TopRung(size_t b) const { return layout_.brackets[b].num_rungs - 1; }

  // Trials of bracket `b` training (toward rung `k`, or any when k < 0).
  // O(1): a scan of every trial per event made a 10,000-trial search (the
  // max_trials cap) cost O(n^2), 25 s of CPU for one PreviewSearch.
  int64_t Training(size_t b, int64_t k = -1) const {
    return k < 0 ? training_[b] : training_at_[b][static_cast<size_t>(k)];
  }

  // Adds (delta 1) or removes (-1) trial t's share of the counters.
  void Count(const Trial& t, int64_t delta) {
    if (t.state == TrialState::kTraining) {
      training_[t.bracket] += delta;
      training_at_[t.bracket][static_cast<size_t>(t.rung)] += delta;
    }
    if (t.state == TrialState::kWaiting) waiting_at_[t.bracket][static_cast<size_t>(t.rung)] += delta;
    if (t.state != TrialState::kEnded) unended_ += delta;
  }
  // Every change of a trial's state or rung goes through here.
  void SetTrial(Trial& t, TrialState state, int64_t rung) {
    Count(t, -1);
    t.state = state;
    t.rung = rung;
    Count(t, 1);
  }
  // Rebuilds the counters from trials_.
  void Recount() {
    training_.assign(brackets_.size(), 0);
    training_at_.resize(brackets_.size());
    waiting_at_.resize(brackets_.size());
    for (size_t b = 0; b < brackets_.size(); ++b) {
      training_at_[b].assign(brackets_[b].rungs.size(), 0);
      waiting_at_[b].assign(brackets_[b].rungs.size(), 0);
    }
    unended_ = 0;
    for (const auto& [id, t] : trials_) Count(t, 1);
  }

  bool CanCreate(size_t b) const {
    if (brackets_[b].created >= layout_.brackets[b].max_trials) return false;
    if (layout_.shared_concurrency <= 0) return Training(b) < layout_.brackets[b].max_concurrent_trials;
    int64_t training = 0;  // Hyperband's order: the brackets before b have created all theirs
    for (size_t c = 0; c < brackets_.size(); ++c) {
      if (c < b && brackets_[c].created < layout_.brackets[c].max_trials) return false;
      training += Training(c);
    }
    return training < layout_.shared_concurrency;
  }

  void Create(size_t b, std::mt19937_64& rng, std::vector<SearcherOp>* ops) {
    CreateTrialOp create;
    create.request_id = next_request_id_++;
    if (tpe_ && !(random_first_bracket_ && b == 0)) {
      tpe_->ProposeFor(&create, rng);
    } else {
      create.hparams = SampleHParams(space_, rng);
      create.trial_seed = DrawTrialSeed(rng);
      if (tpe_) tpe_->Record(create.request_id, create.hparams);  // its results feed the model
    }
    ++brackets_[b].created;
    Trial t;
    t.bracket = b;
    trials_[create.request_id] = t;
    Count(t, 1);
    RequestId id = create.request_id;
    ops->push_back(std::move(create));
    ops->push_back(ValidateAfterOp{id, RungLength(b, 0)});
  }

  // Inserts `e` into rung k of bracket b in order; `ties_first`: before the
  // results it ties with (else after). Returns its index.
  size_t Insert(size_t b, int64_t k, Entry e, bool ties_first) {
    std::vector<Entry>& entries = brackets_[b].rungs[static_cast<size_t>(k)].entries;
    auto pos = ties_first ? std::find_if(entries.begin(), entries.end(), [&](const Entry& x) { return !Better(x, e); })
                          : std::find_if(entries.begin(), entries.end(), [&](const Entry& x) { return Better(e, x); });
    size_t index = static_cast<size_t>(pos - entries.begin());
    entries.insert(pos, e);
    return index;
  }

  void Credit(size_t b, int64_t k) {
    done_batches_ += static_cast<double>(RungLength(b, k) - (k > 0 ? RungLength(b, k - 1) : 0));
  }

  // Promotion variant: marks the not yet promoted trials among the best
  // floor(n/divisor) of rung k promoted and returns them, best first.
  std::vector<RequestId> Promote(size_t b, int64_t k) {
    std::vector<RequestId> out;
    std::vector<Entry>& entries = brackets_[b].rungs[static_cast<size_t>(k)].entries;
    int64_t m = std::min<int64_t>(AshaFloorDivPow(static_cast<int64_t>(entries.size()), layout_.divisor, 1),
                                  static_cast<int64_t>(entries.size()));
    for (int64_t i = 0; i < m; ++i) {
      Entry& e = entries[static_cast<size_t>(i)];
      if (!e.promoted) {
        e.promoted = true;
        out.push_back(e.id);
      }
    }
    return out;
  }

  // Promotion variant: records trial `id`'s result at rung k and carries out
  // what follows (close at the top, promotions below).
  void Record(RequestId id, int64_t k, double value, bool worst, std::vector<SearcherOp>* ops) {
    Trial& t = trials_[id];
    size_t b = t.bracket;
    SetTrial(t, t.state, k);
    Credit(b, k);
    bool live = t.state == TrialState::kTraining || t.state == TrialState::kWaiting;
    if (k == TopRung(b)) {
      Insert(b, k, Entry{id, value, worst, false}, /*ties_first=*/false);
      if (live) {
        SetTrial(t, TrialState::kClosing, t.rung);
        ops->push_back(CloseTrialOp{id});
      }
      return;
    }
    Insert(b, k, Entry{id, value, worst, false}, /*ties_first=*/false);
    if (live) SetTrial(t, TrialState::kWaiting, t.rung);
    for (RequestId p : Promote(b, k)) Advance(p, k + 1, ops);
    if (model_promotions_) ModelPromote(b, k, ops);
  }

  // model_promotions (sampler: tpe): besides the best floor(n/divisor) of
  // rung k, up to floor(n/divisor^2) waiting trials of its better half that
  // the model of the longer results (TpeSampler::ScoreAbove the rung's
  // length) favours (score > 0), best score first: a trial whose short
  // result ranks it below the cut but whose hparams did well when trained
  // longer (a late bloomer where learning curves cross).
  void ModelPromote(size_t b, int64_t k, std::vector<SearcherOp>* ops) {
    Rung& rung = brackets_[b].rungs[static_cast<size_t>(k)];
    const int64_t n = static_cast<int64_t>(rung.entries.size());
    int64_t quota = AshaFloorDivPow(n, layout_.divisor, 2) - rung.model_promoted;
    if (quota <= 0) return;
    std::vector<size_t> candidates;  // indexes into rung.entries
    std::vector<const json*> points;
    for (size_t i = 0; i < static_cast<size_t>(n / 2) && candidates.size() < kMaxTpeModelTrials; ++i) {
      const Entry& e = rung.entries[i];
      const json* hp = tpe_->HParams(e.id);
      if (e.promoted || e.worst || hp == nullptr || trials_[e.id].state != TrialState::kWaiting) continue;
      candidates.push_back(i);
      points.push_back(hp);
    }
    if (candidates.empty()) return;
    const std::vector<double> scores = tpe_->ScoreAbove(RungLength(b, k), points);
    if (scores.empty()) return;
    std::vector<size_t> order(candidates.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
    // Advance only makes a waiting trial train: rung k's entries stay put.
    for (size_t i : order) {
      if (quota <= 0 || !(scores[i] > 0)) break;
      Entry& e = rung.entries[candidates[i]];
      e.promoted = true;
      ++rung.model_promoted;
      --quota;
      Advance(e.id, k + 1, ops);
    }
  }

  // A promoted trial moves to rung k: a waiting one trains on; one that can
  // no longer train is recorded there as the worst result.
  void Advance(RequestId id, int64_t k, std::vector<SearcherOp>* ops) {
    Trial& t = trials_[id];
    if (t.state == TrialState::kWaiting) {
      SetTrial(t, TrialState::kTraining, k);
      ops->push_back(ValidateAfterOp{id, RungLength(t.bracket, k)});
    } else {
      Record(id, k, 0, true, ops);
    }
  }

  // stop_once variant: judges the result at each rung `length` reaches.
  void StopOnceReport(RequestId id, int64_t length, double value, bool worst, std::vector<SearcherOp>* ops) {
    Trial& t = trials_[id];
    size_t b = t.bracket;
    for (int64_t r = t.rung; r <= TopRung(b); ++r) {
      SetTrial(t, t.state, r);
      if (length < RungLength(b, r)) {
        ops->push_back(ValidateAfterOp{id, RungLength(b, r)});
        return;
      }
      size_t index = Insert(b, r, Entry{id, value, worst, false}, /*ties_first=*/true);
      Credit(b, r);
      int64_t n = static_cast<int64_t>(brackets_[b].rungs[static_cast<size_t>(r)].entries.size());
      const int64_t promotable = std::max<int64_t>(1, AshaFloorDivPow(n, layout_.divisor, 1));
      if (r == TopRung(b) || static_cast<int64_t>(index) >= promotable) {
        SetTrial(t, TrialState::kClosing, t.rung);
        ops->push_back(CloseTrialOp{id});
        return;
      }
    }
  }

  // Promotion variant: once every trial of bracket b has a rung-0 result,
  // closes the waiting trials of each rung, bottom up, that nothing trains
  // toward any more.
  void CloseOut(size_t b, std::vector<SearcherOp>* ops) {
    if (layout_.stop_once) return;
    const BracketState& bs = brackets_[b];
    if (bs.created < layout_.brackets[b].max_trials ||
        static_cast<int64_t>(bs.rungs[0].entries.size()) < layout_.brackets[b].max_trials) {
      return;
    }
    for (int64_t k = 0; k <= TopRung(b); ++k) {
      if (Training(b, k) > 0) break;
      if (waiting_at_[b][static_cast<size_t>(k)] == 0) continue;  // nothing to close: skip the scan
      for (const Entry& e : bs.rungs[static_cast<size_t>(k)].entries) {
        Trial& t = trials_[e.id];
        if (!e.promoted && t.state == TrialState::kWaiting) {
          SetTrial(t, TrialState::kClosing, t.rung);
          ops->push_back(CloseTrialOp{e.id});
        }
      }
    }
  }

  // Creates what bracket b (with shared slots: any bracket, in order) may.
  void AfterEvent(size_t b, std::mt19937_64& rng, std::vector<SearcherOp>* ops) {
    if (layout_.shared_concurrency > 0) {
      for (size_t c = 0; c < brackets_.size(); ++c) {
        while (CanCreate(c)) Create(c, rng, ops);
      }
    } else {
      while (CanCreate(b)) Create(b, rng, ops);
    }
    CloseOut(b, ops);
    MaybeShutdown(ops);
  }

  void MaybeShutdown(std::vector<SearcherOp>* ops) {
    if (shutdown_sent_) return;
    for (size_t b = 0; b < brackets_.size(); ++b) {
      if (brackets_[b].created < layout_.brackets[b].max_trials) return;
    }
    if (unended_ > 0) return;
    shutdown_sent_ = true;
    ops->push_back(ShutdownOp{ended_ > 0 && errored_ == ended_});
  }

  std::string name_;
  HyperparameterSpace space_;
  AshaLayout layout_;
  bool best_so_far_ = false;        // rung_metric: best
  std::optional<TpeSampler> tpe_;   // sampler: tpe
  // tpe_brackets: after_first with several brackets: bracket 0 (the most
  // rungs) draws as sampler: random does, and TPE models its results.
  bool random_first_bracket_ = false;
  bool model_promotions_ = false;  // sampler: tpe, promotion variant: ModelPromote
  double planned_batches_ = 0;

  std::vector<BracketState> brackets_;
  std::map<RequestId, Trial> trials_;
  // Derived from trials_ (SetTrial keeps them, Recount rebuilds them): trials
  // training per bracket and per [bracket][rung], waiting per [bracket][rung],
  // and trials not ended.
  std::vector<int64_t> training_;
  std::vector<std::vector<int64_t>> training_at_;
  std::vector<std::vector<int64_t>> waiting_at_;
  int64_t unended_ = 0;
  RequestId next_request_id_ = 1;
  int64_t ended_ = 0;    // counted trials ended (closed or exited, not invalid-hp)
  int64_t errored_ = 0;  // of those, exited with kErrored
  double done_batches_ = 0;
  bool initialized_ = false;
  bool shutdown_sent_ = false;
};

}  // namespace

std::unique_ptr<SearchMethod> NewAshaSearch(const ExperimentConfig& config, AshaLayout layout) {
  return std::make_unique<AshaSearch>(std::string(SearcherNameToString(config.searcher.name)),
                                      config.hyperparameters, std::move(layout), config.searcher.options,
                                      config.reproducibility.experiment_seed.value_or(0));
}

}  // namespace master
}  // namespace det
