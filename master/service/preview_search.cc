#include "master/service/preview_search.h"

#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "common/proto_json.h"
#include "common/status_macros.h"
#include "master/search/preview.h"

namespace det::master {

absl::StatusOr<det::api::v1::PreviewSearchResponse> PreviewSearchFor(
    const det::api::v1::PreviewSearchRequest& request) {
  DET_ASSIGN_OR_RETURN(ExperimentConfig config, ParseExperimentConfig(request.config_yaml(), "config"));
  // As CreateExperiment: the lengths must convert (first sample).
  DET_RETURN_IF_ERROR(ResolveBatchLengths(config, "; set records_per_epoch to use epochs").status());
  DET_ASSIGN_OR_RETURN(SearchPreview preview, PreviewSearch(config, SearcherLengthOf(config.searcher).max,
                                                            request.simulation_seed()));

  det::api::v1::PreviewSearchResponse resp;
  resp.set_max_length_batches(preview.max_length_batches);
  resp.set_length_unit(preview.length.unit);
  resp.set_max_length(preview.length.max);
  for (const std::string& w : config.warnings) resp.add_warnings(w);
  for (const PreviewTrial& t : preview.trials) {
    auto* out = resp.add_trials();
    out->set_request_id(t.request_id);
    auto hp = JsonToStruct(t.hparams);
    if (hp.ok()) *out->mutable_hparams() = *std::move(hp);
    for (int64_t v : t.validation_points) out->add_validation_points(v);
    out->set_total_batches(t.total_batches);
    out->set_total_length(t.total_length);
    out->set_stopped_early(t.stopped_early);
  }
  for (const PreviewBracket& b : preview.brackets) {
    auto* bs = resp.add_brackets();
    bs->set_bracket(static_cast<int32_t>(b.bracket));
    bs->set_num_rungs(static_cast<int32_t>(b.rungs.size()));
    bs->set_num_trials(static_cast<int32_t>(b.num_trials));
    for (const PreviewRung& r : b.rungs) {
      auto* rs = resp.add_rungs();
      rs->set_bracket(static_cast<int32_t>(b.bracket));
      rs->set_rung(static_cast<int32_t>(r.rung));
      rs->set_num_trials(static_cast<int32_t>(r.num_trials));
      rs->set_batches_per_trial(r.batches_per_trial);
      rs->set_length_per_trial(r.length_per_trial);
    }
  }
  resp.set_total_batches(preview.total_batches);
  resp.set_summary(FormatPreview(preview));
  return resp;
}

}  // namespace det::master
