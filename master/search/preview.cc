#include "master/search/preview.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "master/search/asha.h"

namespace det {
namespace master {
namespace {

constexpr int64_t kMaxSteps = 10000000;

// Uniform in [0, 1) from the top 53 bits: the same on every platform.
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

absl::StatusOr<SearchPreview> PreviewSearch(const ExperimentConfig& config, int64_t max_length,
                                            uint32_t simulation_seed) {
  absl::StatusOr<Searcher> searcher = Searcher::Create(config, max_length);
  if (!searcher.ok()) return searcher.status();

  // The rung lengths of each bracket.
  std::vector<std::vector<int64_t>> bracket_rungs;
  if (IsSuccessiveHalving(config.searcher.name)) {
    absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, max_length);
    if (!layout.ok()) return layout.status();
    for (const AshaBracket& b : layout->brackets) bracket_rungs.push_back(b.rung_lengths);
  } else if (config.searcher.name == SearcherName::kPbt && config.searcher.options.pbt.perturb_period > 0) {
    std::vector<int64_t> generations;
    for (int64_t l = config.searcher.options.pbt.perturb_period;; l += config.searcher.options.pbt.perturb_period) {
      generations.push_back(std::min(l, max_length));
      if (l >= max_length || generations.size() > 100000) break;
    }
    bracket_rungs.push_back(std::move(generations));
  } else {
    bracket_rungs.push_back({max_length});
  }

  SearchPreview preview;
  preview.searcher = std::string(SearcherNameToString(config.searcher.name));
  preview.length = ClusterSearcherLength(config);  // epochs the runtime counts have no batches here
  preview.length.max = max_length;
  // Batches, where every trial has the same: a constant (or no) batch size.
  std::optional<BatchLengths> constant;
  auto gbs = config.hyperparameters.find("global_batch_size");
  if (!preview.length.is_metric() &&
      (gbs == config.hyperparameters.end() || gbs->second.type == Hyperparameter::Type::kConst)) {
    absl::StatusOr<BatchLengths> lengths = TrialBatchLengths(config, FirstHParams(config.hyperparameters, 0));
    if (lengths.ok()) constant = *lengths;
  }
  auto batches = [&](int64_t units) -> int64_t {
    if (!constant) return 0;
    absl::StatusOr<int64_t> b = SearcherUnitsToBatches(preview.length, units, *constant);
    return b.ok() ? *b : 0;
  };
  preview.batches_constant = constant.has_value();
  preview.max_length_batches = batches(max_length);
  std::map<RequestId, PreviewTrial> trials;
  std::mt19937_64 rng(simulation_seed);
  std::deque<SearcherOp> queue;
  auto push = [&queue](std::vector<SearcherOp> ops) {
    for (SearcherOp& op : ops) queue.push_back(std::move(op));
  };

  push(searcher->InitialOperations());
  int64_t steps = 0;
  while (!searcher->shutdown()) {
    if (queue.empty()) return absl::InternalError("preview: the searcher stopped without shutting down");
    if (++steps > kMaxSteps) return absl::InternalError("preview: the searcher did not shut down");
    SearcherOp op = std::move(queue.front());
    queue.pop_front();
    if (auto* c = std::get_if<CreateTrialOp>(&op)) {
      PreviewTrial& t = trials[c->request_id];
      t.request_id = c->request_id;
      t.hparams = c->hparams;
      t.bracket = searcher->TrialBracket(c->request_id);
      if (c->parent != 0) {
        t.parent = c->parent;
        t.start_length = trials[c->parent].total_length;
      }
      push(searcher->TrialCreated(c->request_id));
    } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      PreviewTrial& t = trials[v->request_id];
      t.validation_points.push_back(v->length);
      t.total_length = std::max(t.total_length, v->length);
      push(searcher->ValidationCompleted(v->request_id, Uniform(rng), v->length));
    } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
      push(searcher->TrialClosed(c->request_id));
    }
  }

  for (size_t b = 0; b < bracket_rungs.size(); ++b) {
    PreviewBracket pb;
    pb.bracket = static_cast<int64_t>(b);
    for (size_t k = 0; k < bracket_rungs[b].size(); ++k) {
      pb.rungs.push_back(
          PreviewRung{static_cast<int64_t>(k), 0, bracket_rungs[b][k], batches(bracket_rungs[b][k])});
    }
    preview.brackets.push_back(std::move(pb));
  }
  const bool pbt = config.searcher.name == SearcherName::kPbt;
  for (auto& [id, t] : trials) {
    t.stopped_early = t.total_length < max_length;
    if (pbt) {
      for (PreviewRung& r : preview.brackets[0].rungs) {
        if (std::count(t.validation_points.begin(), t.validation_points.end(), r.length_per_trial)) ++r.num_trials;
      }
      ++preview.brackets[0].num_trials;
      t.total_length -= t.start_length;
      t.total_batches = batches(t.total_length);
      preview.total_length += t.total_length;
      preview.total_batches += t.total_batches;
      preview.trials.push_back(std::move(t));
      continue;
    }
    t.total_batches = batches(t.total_length);
    preview.total_length += t.total_length;
    preview.total_batches += t.total_batches;
    if (t.bracket >= 0 && t.bracket < static_cast<int64_t>(preview.brackets.size())) {
      PreviewBracket& pb = preview.brackets[static_cast<size_t>(t.bracket)];
      ++pb.num_trials;
      size_t reached = std::min(t.validation_points.size(), pb.rungs.size());
      for (size_t k = 0; k < reached; ++k) ++pb.rungs[k].num_trials;
    }
    preview.trials.push_back(std::move(t));
  }
  return preview;
}

namespace {

// "2 epochs (782 batches)", "2 epochs", "1000 tokens".
std::string LengthWithBatches(const SearchPreview& preview, int64_t units, int64_t batches) {
  std::string out = FormatSearcherLength(preview.length, units);
  if (preview.batches_constant) absl::StrAppend(&out, " (", batches, batches == 1 ? " batch)" : " batches)");
  return out;
}

}  // namespace

std::string FormatPreview(const SearchPreview& preview) {
  // In batches: the table as it always was.
  const bool in_batches = preview.length.length_unit == Length::Unit::kBatches;
  std::string out = absl::StrCat("Searcher: ", preview.searcher, preview.length.is_metric() ? ", max_time " : ", max_length ");
  if (in_batches) {
    absl::StrAppend(&out, preview.length.max, " batches\n");
  } else {
    absl::StrAppend(&out, LengthWithBatches(preview, preview.length.max, preview.max_length_batches));
    if (!preview.batches_constant && !preview.length.is_metric()) {
      absl::StrAppend(&out, " (batches differ per trial: each converts with its own global_batch_size)");
    }
    absl::StrAppend(&out, "\n");
  }
  for (const PreviewBracket& b : preview.brackets) {
    absl::StrAppend(&out, "Bracket ", b.bracket + 1, ": ", b.rungs.size(), b.rungs.size() == 1 ? " rung, " : " rungs, ",
                    b.num_trials, b.num_trials == 1 ? " trial\n" : " trials\n");
    absl::StrAppend(&out, in_batches ? "  Rung  Trials  Batches per trial\n" : "  Rung  Trials  Length per trial\n");
    for (const PreviewRung& r : b.rungs) {
      if (in_batches) {
        absl::StrAppend(&out, absl::StrFormat("  %4d  %6d  %17d\n", r.rung, r.num_trials, r.length_per_trial));
      } else {
        absl::StrAppend(&out, absl::StrFormat("  %4d  %6d  %s\n", r.rung, r.num_trials,
                                              LengthWithBatches(preview, r.length_per_trial, r.batches_per_trial)));
      }
    }
  }
  int64_t stopped = std::count_if(preview.trials.begin(), preview.trials.end(),
                                  [](const PreviewTrial& t) { return t.stopped_early; });
  absl::StrAppend(&out, "Total: ", preview.trials.size(), preview.trials.size() == 1 ? " trial (" : " trials (",
                  stopped, " stopped early), ",
                  in_batches ? absl::StrCat(preview.total_length, " batches")
                             : LengthWithBatches(preview, preview.total_length, preview.total_batches),
                  "\n");
  return out;
}

}  // namespace master
}  // namespace det
