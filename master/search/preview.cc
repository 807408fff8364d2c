#include "master/search/preview.h"

#include <algorithm>
#include <deque>
#include <map>
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

absl::StatusOr<SearchPreview> PreviewSearch(const ExperimentConfig& config, int64_t max_length_batches,
                                            uint32_t simulation_seed) {
  absl::StatusOr<Searcher> searcher = Searcher::Create(config, max_length_batches);
  if (!searcher.ok()) return searcher.status();

  // The rung lengths of each bracket.
  std::vector<std::vector<int64_t>> bracket_rungs;
  if (config.searcher.name == SearcherName::kAdaptiveAsha || config.searcher.name == SearcherName::kAsyncHalving) {
    absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, max_length_batches);
    if (!layout.ok()) return layout.status();
    for (const AshaBracket& b : layout->brackets) bracket_rungs.push_back(b.rung_lengths);
  } else {
    bracket_rungs.push_back({max_length_batches});
  }

  SearchPreview preview;
  preview.searcher = std::string(SearcherNameToString(config.searcher.name));
  preview.max_length_batches = max_length_batches;
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
      push(searcher->TrialCreated(c->request_id));
    } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      PreviewTrial& t = trials[v->request_id];
      t.validation_points.push_back(v->length);
      t.total_batches = std::max(t.total_batches, v->length);
      push(searcher->ValidationCompleted(v->request_id, Uniform(rng), v->length));
    } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
      push(searcher->TrialClosed(c->request_id));
    }
  }

  for (size_t b = 0; b < bracket_rungs.size(); ++b) {
    PreviewBracket pb;
    pb.bracket = static_cast<int64_t>(b);
    for (size_t k = 0; k < bracket_rungs[b].size(); ++k) {
      pb.rungs.push_back(PreviewRung{static_cast<int64_t>(k), 0, bracket_rungs[b][k]});
    }
    preview.brackets.push_back(std::move(pb));
  }
  for (auto& [id, t] : trials) {
    t.stopped_early = t.total_batches < max_length_batches;
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

std::string FormatPreview(const SearchPreview& preview) {
  std::string out = absl::StrCat("Searcher: ", preview.searcher, ", max_length ", preview.max_length_batches,
                                 " batches\n");
  for (const PreviewBracket& b : preview.brackets) {
    absl::StrAppend(&out, "Bracket ", b.bracket + 1, ": ", b.rungs.size(), b.rungs.size() == 1 ? " rung, " : " rungs, ",
                    b.num_trials, b.num_trials == 1 ? " trial\n" : " trials\n");
    absl::StrAppend(&out, "  Rung  Trials  Batches per trial\n");
    for (const PreviewRung& r : b.rungs) {
      absl::StrAppend(&out, absl::StrFormat("  %4d  %6d  %17d\n", r.rung, r.num_trials, r.batches_per_trial));
    }
  }
  int64_t stopped = std::count_if(preview.trials.begin(), preview.trials.end(),
                                  [](const PreviewTrial& t) { return t.stopped_early; });
  absl::StrAppend(&out, "Total: ", preview.trials.size(), preview.trials.size() == 1 ? " trial (" : " trials (",
                  stopped, " stopped early), ", preview.total_batches, " batches\n");
  return out;
}

}  // namespace master
}  // namespace det
