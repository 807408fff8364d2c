#include "cli/commands.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/cli_errors.h"
#include "cli/follow_progress.h"
#include "cli/metrics_log_commands.h"
#include "cli/table.h"
#include "cli/terminal_text.h"
#include "cli/trial_abi_check.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "common/utf8.h"

namespace det::cli {

namespace v1 = det::api::v1;

namespace {

using Stub = Client::Stub;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

constexpr int kPageSize = 1000;

// --------------------------------------------------------------- formatting

// "STATE_ACTIVE" -> "ACTIVE"; "" for the UNSPECIFIED value.
std::string EnumLabel(const std::string& name, const std::string& prefix) {
  std::string label = name.compare(0, prefix.size(), prefix) == 0 ? name.substr(prefix.size()) : name;
  return label == "UNSPECIFIED" ? "" : label;
}


bool IsTerminal(v1::State state) {
  return state == v1::STATE_COMPLETED || state == v1::STATE_CANCELED || state == v1::STATE_ERROR;
}


std::string FormatDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(absl::Seconds(d.seconds()));
}


std::string FormatBool(bool b) { return b ? "yes" : "no"; }

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}


std::string StructJson(const google::protobuf::Struct& s) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(s, &json, options).ok()) return "";
  return json;
}


// --------------------------------------------------------------- RPC helpers

// Fetches every page of a paginated list RPC into `all` (items appended in
// order; pagination rewritten to describe the whole list). `items` maps a
// response to its mutable repeated field.
template <typename Request, typename Response, typename ItemsFn>
grpc::Status FetchAll(Client& client, grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                      Request request, Response* all, ItemsFn items) {
  all->Clear();
  request.set_offset(0);
  request.set_limit(kPageSize);
  int32_t total = 0;
  while (true) {
    Response page;
    grpc::Status status = client.Call(method, request, &page);
    if (!status.ok()) return status;
    auto* page_items = items(page);
    int n = page_items->size();
    for (auto& item : *page_items) items(*all)->Add(std::move(item));
    total = page.pagination().total();
    if (n == 0 || request.offset() + n >= total) break;
    request.set_offset(request.offset() + n);
  }
  int32_t size = items(*all)->size();
  auto* p = all->mutable_pagination();
  p->set_offset(0);
  p->set_limit(size);
  p->set_start_index(0);
  p->set_end_index(size);
  p->set_total(std::max(total, size));
  return grpc::Status::OK;
}

grpc::Status FetchTrials(Client& client, int64_t experiment_id, v1::GetExperimentTrialsResponse* all) {
  v1::GetExperimentTrialsRequest req;
  req.set_experiment_id(experiment_id);
  return FetchAll(client, &Stub::GetExperimentTrials, req, all,
                  [](v1::GetExperimentTrialsResponse& r) { return r.mutable_trials(); });
}

bool ReadFileBytes(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// ------------------------------------------------------------------ tables

void PrintExperiments(const google::protobuf::RepeatedPtrField<v1::Experiment>& exps, bool show_archived,
                      std::ostream& out) {
  std::vector<std::string> headers = {"ID", "NAME", "STATE", "PROGRESS", "TRIALS", "BEST METRIC", "USER",
                                      "START TIME", "END TIME", "WORKSPACE/PROJECT"};
  if (show_archived) headers.push_back("ARCHIVED");
  Table t(headers);
  for (const auto& e : exps) {
    std::vector<std::string> row = {
        absl::StrCat(e.id()),
        e.name(),
        StateLabel(e.state()),
        e.has_progress() ? absl::StrCat(static_cast<int>(e.progress() * 100 + 0.5), "%") : "",
        absl::StrCat(e.num_trials()),
        e.has_best_validation_metric() ? FormatDouble(e.best_validation_metric()) : "",
        e.username(),
        FormatTime(e.start_time()),
        FormatTime(e.end_time()), absl::StrCat(e.workspace_name(), "/", e.project_name())};
    if (show_archived) row.push_back(FormatBool(e.archived()));
    t.AddRow(std::move(row));
  }
  t.Print(out);
}

void PrintTrials(const google::protobuf::RepeatedPtrField<v1::Trial>& trials, std::ostream& out) {
  Table t({"ID", "STATE", "BATCHES", "RESTARTS", "BEST VALIDATION", "LATEST CHECKPOINT", "START TIME", "END TIME",
           "HPARAMS"});
  for (const auto& tr : trials) {
    std::string batches = absl::StrCat(tr.total_batches_processed());
    if (tr.searcher_target_batches() > 0) absl::StrAppend(&batches, "/", tr.searcher_target_batches());
    t.AddRow({absl::StrCat(tr.id()), StateLabel(tr.state()), batches, absl::StrCat(tr.restarts()),
              tr.has_best_validation() ? FormatMetrics(tr.best_validation().metrics()) : "",
              tr.latest_checkpoint_uuid(), FormatTime(tr.start_time()), FormatTime(tr.end_time()),
              StructJson(tr.hparams())});
  }
  t.Print(out);
}

// A checkpoint's epochs: "unknown" where the master knows no epoch length
// (no records_per_epoch) rather than 0.
std::string EpochsText(const v1::Checkpoint& c) {
  return c.total_epochs() == 0 && c.total_batches() > 0 ? "unknown" : FormatDouble(c.total_epochs());
}

void PrintCheckpoints(const google::protobuf::RepeatedPtrField<v1::Checkpoint>& cps, std::ostream& out) {
  Table t({"UUID", "TRIAL", "STATE", "BATCHES", "EPOCHS", "SEARCHER METRIC", "SIZE", "REPORT TIME"});
  for (const auto& c : cps) {
    t.AddRow({c.uuid(), absl::StrCat(c.trial_id()), EnumLabel(v1::CheckpointState_Name(c.state()), "CHECKPOINT_STATE_"),
              absl::StrCat(c.total_batches()), EpochsText(c),
              c.has_searcher_metric() ? FormatDouble(c.searcher_metric()) : "", FormatBytes(c.size_bytes()),
              FormatTime(c.report_time())});
  }
  t.Print(out);
}


}  // namespace

// Shared with the other command files (commands.h).
std::string StateLabel(v1::State state) { return EnumLabel(v1::State_Name(state), "STATE_"); }

std::string FormatDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// "a=1 b=2", metrics sorted by name.
std::string FormatMetrics(const google::protobuf::Map<std::string, double>& metrics) {
  std::map<std::string, double> sorted(metrics.begin(), metrics.end());
  std::vector<std::string> parts;
  for (const auto& [k, v] : sorted) parts.push_back(absl::StrCat(k, "=", FormatDouble(v)));
  return absl::StrJoin(parts, " ");
}

std::string FormatTime(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return "";
  absl::Time t = absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", t, absl::LocalTimeZone());
}

std::string FormatLog(const v1::TaskLog& log, bool with_trial, bool raw) {
  std::string line;
  std::string ts = FormatTime(log.timestamp());
  if (!ts.empty()) absl::StrAppend(&line, "[", ts, "] ");
  if (with_trial) absl::StrAppend(&line, "[trial ", log.trial_id(), "] ");
  if (log.has_rank()) absl::StrAppend(&line, "[rank=", log.rank(), "] ");
  std::string level = EnumLabel(v1::LogLevel_Name(log.level()), "LOG_LEVEL_");
  if (!level.empty() && level != "INFO") absl::StrAppend(&line, level, ": ");
  absl::StrAppend(&line, raw ? log.message() : TerminalText(log.message()));
  return line;
}

void PrintJson(const google::protobuf::Message& message, std::ostream& out, bool pretty) {
  auto converted = MessageToJsonOrError(message, pretty);
  const std::string json =
      converted.ok() ? *converted : absl::StrCat("{\"error\": \"", converted.status().message(), "\"}");
  out << json;
  if (json.empty() || json.back() != '\n') out << '\n';
}

int ReportError(const Client& client, const grpc::Status& status, std::ostream& err) {
  err << "det-cli: error: " << TerminalText(client.ErrorMessage(status), kKeepLayout) << '\n';
  return 1;
}

// ------------------------------------------------------------- experiments

namespace {

// Larger trial libraries are uploaded in chunks (UploadArtifact) rather than
// inline: the master's message limit is a few MiB.
constexpr size_t kInlineTrialSoBytes = 1 << 20;
constexpr size_t kUploadChunkBytes = 1 << 20;

}  // namespace

grpc::Status UploadTrialSo(Client& client, const std::string& bytes, std::string* sha256) {
  grpc::ClientContext ctx;
  client.PrepareContext(&ctx, /*streaming=*/true);
  v1::UploadArtifactResponse resp;
  auto writer = client.stub().UploadArtifact(&ctx, &resp);
  *sha256 = Sha256Hex(bytes);
  for (size_t off = 0; off == 0 || off < bytes.size(); off += kUploadChunkBytes) {
    v1::UploadArtifactRequest msg;
    if (off == 0) {
      msg.set_sha256(*sha256);
      msg.set_size_bytes(static_cast<int64_t>(bytes.size()));
    }
    msg.set_chunk(bytes.substr(off, kUploadChunkBytes));
    if (!writer->Write(msg)) break;  // the master answered early: Finish says why
  }
  writer->WritesDone();
  return writer->Finish();
}

std::string TrialSoName(const std::string& trial_path) {
  std::string name = Utf8Sanitized(std::filesystem::path(trial_path).filename().string().substr(0, 255), "?");
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name;
}

int ExperimentCreate(Client& client, const ExperimentCreateArgs& args, const CommandIo& io) {
  v1::CreateExperimentRequest req;
  if (!ReadFileBytes(args.config_path, req.mutable_config_yaml())) {
    io.err << "det-cli: error: cannot read " << args.config_path << '\n';
    return 2;
  }
  if (std::string bad = NotUtf8Error(args.config_path, req.config_yaml()); !bad.empty()) {
    io.err << "det-cli: error: " << TerminalText(bad) << '\n';
    return 2;
  }
  if (!ReadFileBytes(args.trial_path, req.mutable_trial_so())) {
    io.err << "det-cli: error: cannot read " << args.trial_path << '\n';
    return 2;
  }
  if (!args.no_local_abi_check) {
    const std::string det_trial = args.det_trial.empty() ? DetTrialBeside() : args.det_trial;
    if (int rc = CheckTrialAbiLocally(args.trial_path, det_trial, /*before_upload=*/true, io.err); rc != 0) return rc;
  }
  // The master names the file in its ABI error and the agents' load errors.
  req.set_trial_so_name(TrialSoName(args.trial_path));
  if (req.trial_so().size() > kInlineTrialSoBytes) {
    std::string sha;
    grpc::Status uploaded = UploadTrialSo(client, req.trial_so(), &sha);
    if (!uploaded.ok()) return ReportError(client, uploaded, io.err);
    req.clear_trial_so();
    req.set_trial_so_sha256(sha);
  }
  req.set_activate(!args.paused);
  v1::CreateExperimentResponse resp;
  grpc::Status status = client.Call(&Stub::CreateExperiment, req, &resp);
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    // Name the user's file where the master says "config:LINE".
    status = grpc::Status(status.error_code(), NameConfigFile(status.error_message(), args.config_path));
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  for (const auto& w : resp.warnings()) io.err << "det-cli: warning: " << TerminalText(w, kKeepLayout) << '\n';
  io.out << "Created experiment " << resp.experiment().id() << '\n';
  io.out.flush();
  if (!args.follow) return 0;
  return ExperimentFollow(client, resp.experiment().id(), args.poll_interval, io);
}

int ExperimentFollow(Client& client, int64_t experiment_id, std::chrono::milliseconds poll_interval,
                     const CommandIo& io) {
  v1::State last_state = v1::STATE_UNSPECIFIED;
  FollowProgress progress(io.out_is_terminal);
  while (true) {
    v1::GetExperimentRequest req;
    req.set_experiment_id(experiment_id);
    v1::GetExperimentResponse resp;
    grpc::Status status = client.Call(&Stub::GetExperiment, req, &resp);
    if (!status.ok()) return ReportError(client, status, io.err);
    const v1::Experiment& exp = resp.experiment();

    if (exp.state() != last_state) {
      std::string line = absl::StrCat("Experiment ", experiment_id, " ", StateLabel(exp.state()));
      if (exp.has_progress()) absl::StrAppend(&line, " (", static_cast<int>(exp.progress() * 100 + 0.5), "% done)");
      progress.Note(line, io.out);
      last_state = exp.state();
    }
    v1::GetExperimentTrialsResponse trials;
    status = FetchTrials(client, experiment_id, &trials);
    if (!status.ok()) return ReportError(client, status, io.err);
    const absl::Time now = absl::Now();
    for (const auto& tr : trials.trials()) progress.Observe(tr, now);
    progress.Render(io.out);
    if (IsTerminal(exp.state())) {
      if (exp.has_best_validation_metric()) {
        io.out << "Best " << TerminalText(exp.searcher_metric()) << ": " << FormatDouble(exp.best_validation_metric())
               << " (trial " << exp.best_trial_id() << ")\n";
      }
      if (exp.state() == v1::STATE_COMPLETED) return 0;
      io.err << "det-cli: error: experiment " << experiment_id << " ended " << StateLabel(exp.state());
      if (!exp.error_message().empty()) io.err << ": " << TerminalText(exp.error_message(), kKeepLayout);
      io.err << '\n';
      return 1;
    }
    std::this_thread::sleep_for(poll_interval);
  }
}

int ExperimentList(Client& client, bool all, const CommandIo& io, const v1::GetExperimentsRequest& filter) {
  v1::GetExperimentsRequest req = filter;
  v1::GetExperimentsResponse resp;
  auto items = [](v1::GetExperimentsResponse& r) { return r.mutable_experiments(); };
  grpc::Status status = FetchAll(client, &Stub::GetExperiments, req, &resp, items);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (all) {
    // The default filter hides archived experiments; fetch those too.
    req.set_archived(true);
    v1::GetExperimentsResponse archived;
    status = FetchAll(client, &Stub::GetExperiments, req, &archived, items);
    if (!status.ok()) return ReportError(client, status, io.err);
    std::set<int32_t> seen;
    for (const auto& e : resp.experiments()) seen.insert(e.id());
    for (auto& e : *archived.mutable_experiments()) {
      if (seen.insert(e.id()).second) resp.add_experiments()->Swap(&e);
    }
    auto* exps = resp.mutable_experiments();
    std::sort(exps->begin(), exps->end(),
              [](const v1::Experiment& a, const v1::Experiment& b) { return a.id() > b.id(); });
    int32_t n = exps->size();
    resp.mutable_pagination()->set_limit(n);
    resp.mutable_pagination()->set_end_index(n);
    resp.mutable_pagination()->set_total(n);
  }
  if (io.json) {
    PrintJson(resp, io.out);
  } else {
    PrintExperiments(resp.experiments(), all, io.out);
  }
  return 0;
}

int ExperimentDescribe(Client& client, int64_t experiment_id, const CommandIo& io) {
  v1::GetExperimentRequest req;
  req.set_experiment_id(experiment_id);
  v1::GetExperimentResponse resp;
  grpc::Status status = client.Call(&Stub::GetExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  v1::GetExperimentTrialsResponse trials;
  status = FetchTrials(client, experiment_id, &trials);
  if (!status.ok()) return ReportError(client, status, io.err);

  const v1::Experiment& e = resp.experiment();
  KeyValues kv = {
      {"ID", absl::StrCat(e.id())},
      {"Name", e.name()},
      {"State", StateLabel(e.state())},
      {"Progress", e.has_progress() ? absl::StrCat(static_cast<int>(e.progress() * 100 + 0.5), "%") : ""},
      {"Searcher", absl::StrCat(e.searcher_name(), " (metric ", e.searcher_metric(),
                                e.smaller_is_better() ? ", smaller is better)" : ", larger is better)")},
      {"Best metric", e.has_best_validation_metric()
                          ? absl::StrCat(FormatDouble(e.best_validation_metric()), " (trial ", e.best_trial_id(), ")")
                          : ""},
      {"Best checkpoint", e.best_checkpoint_uuid()},
      {"Latest checkpoint", e.latest_checkpoint_uuid()},
      {"Trials", absl::StrCat(e.num_trials())},
      {"User", e.username()},
      {"Resource pool", e.resource_pool()},
      {"Job", absl::StrCat(e.job_id(), ": priority ", e.priority(), ", weight ", FormatDouble(e.weight()),
                           ", max slots ", e.max_slots() > 0 ? absl::StrCat(e.max_slots()) : "no cap")},
      {"Labels", absl::StrJoin(e.labels(), ", ")},
      {"Archived", FormatBool(e.archived())},
      {"Trial.so", absl::StrCat(e.trial_so().sha256(), " (", FormatBytes(e.trial_so().size_bytes()), ")")},
      {"Start time", FormatTime(e.start_time())},
      {"End time", FormatTime(e.end_time())},
  };
  if (!e.description().empty()) kv.insert(kv.begin() + 2, {"Description", e.description()});
  if (e.parent_id() != 0) kv.push_back({"Parent", absl::StrCat(e.parent_id())});
  if (!e.error_message().empty()) kv.push_back({"Error", e.error_message()});
  PrintKeyValues(io.out, kv);
  io.out << "\nTrials:\n";
  PrintTrials(trials.trials(), io.out);
  return 0;
}

int ExperimentLogs(Client& client, int64_t experiment_id, const CommandIo& io) {
  v1::GetExperimentTrialsResponse trials;
  grpc::Status status = FetchTrials(client, experiment_id, &trials);
  if (!status.ok()) return ReportError(client, status, io.err);
  for (const auto& tr : trials.trials()) {
    status = StreamTrialLogs(client, tr.id(), /*follow=*/false, /*with_trial=*/true, io);
    if (!status.ok()) return ReportError(client, status, io.err);
  }
  return 0;
}

int ExperimentListTrials(Client& client, int64_t experiment_id, const CommandIo& io) {
  v1::GetExperimentTrialsResponse trials;
  grpc::Status status = FetchTrials(client, experiment_id, &trials);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(trials, io.out);
  } else {
    PrintTrials(trials.trials(), io.out);
  }
  return 0;
}

int ExperimentListCheckpoints(Client& client, int64_t experiment_id, const CommandIo& io) {
  v1::GetExperimentCheckpointsRequest req;
  req.set_experiment_id(experiment_id);
  v1::GetExperimentCheckpointsResponse resp;
  grpc::Status status = FetchAll(client, &Stub::GetExperimentCheckpoints, req, &resp,
                                 [](v1::GetExperimentCheckpointsResponse& r) { return r.mutable_checkpoints(); });
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
  } else {
    PrintCheckpoints(resp.checkpoints(), io.out);
  }
  return 0;
}

int ExperimentChangeState(Client& client, ExperimentAction action, int64_t experiment_id, const CommandIo& io) {
  grpc::Status status;
  const char* done = "";
  switch (action) {
    case ExperimentAction::kPause: {
      v1::PauseExperimentRequest req;
      req.set_experiment_id(experiment_id);
      v1::PauseExperimentResponse resp;
      status = client.Call(&Stub::PauseExperiment, req, &resp);
      done = "Paused";
      break;
    }
    case ExperimentAction::kActivate: {
      v1::ActivateExperimentRequest req;
      req.set_experiment_id(experiment_id);
      v1::ActivateExperimentResponse resp;
      status = client.Call(&Stub::ActivateExperiment, req, &resp);
      done = "Activated";
      break;
    }
    case ExperimentAction::kCancel: {
      v1::CancelExperimentRequest req;
      req.set_experiment_id(experiment_id);
      v1::CancelExperimentResponse resp;
      status = client.Call(&Stub::CancelExperiment, req, &resp);
      done = "Canceled";
      break;
    }
    case ExperimentAction::kKill: {
      v1::KillExperimentRequest req;
      req.set_experiment_id(experiment_id);
      v1::KillExperimentResponse resp;
      status = client.Call(&Stub::KillExperiment, req, &resp);
      done = "Killed";
      break;
    }
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << done << " experiment " << experiment_id << '\n';
  return 0;
}

// ------------------------------------------------------------------ trials

int TrialDescribe(Client& client, int64_t trial_id, const CommandIo& io) {
  v1::GetTrialRequest req;
  req.set_trial_id(trial_id);
  v1::GetTrialResponse resp;
  grpc::Status status = client.Call(&Stub::GetTrial, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  const v1::Trial& t = resp.trial();
  std::string batches = absl::StrCat(t.total_batches_processed());
  if (t.searcher_target_batches() > 0) absl::StrAppend(&batches, " of ", t.searcher_target_batches());
  auto validation = [](bool has, const v1::MetricsReport& r) {
    return has ? absl::StrCat(FormatMetrics(r.metrics()), " (batch ", r.total_batches(), ")") : std::string();
  };
  KeyValues kv = {
      {"ID", absl::StrCat(t.id())},
      {"Experiment", absl::StrCat(t.experiment_id())},
      {"State", StateLabel(t.state())},
      {"State reason", t.state_reason()},
      {"Runner state", EnumLabel(v1::AllocationState_Name(t.runner_state()), "ALLOCATION_STATE_")},
      {"Hyperparameters", StructJson(t.hparams())},
      {"Seed", absl::StrCat(t.seed())},
      {"Restarts", absl::StrCat(t.restarts())},
      {"Batches", batches},
      {"Best validation", validation(t.has_best_validation(), t.best_validation())},
      {"Latest validation", validation(t.has_latest_validation(), t.latest_validation())},
      {"Best checkpoint", t.best_checkpoint_uuid()},
      {"Latest checkpoint", t.latest_checkpoint_uuid()},
      {"Task", t.task_id()},
      {"Allocation", t.allocation_id()},
      {"Start time", FormatTime(t.start_time())},
      {"End time", FormatTime(t.end_time())},
  };
  if (!t.error_message().empty()) kv.push_back({"Error", t.error_message()});
  if (!t.preemption().empty()) kv.push_back({"Preempted", t.preemption()});
  if (t.parent_trial_id() != 0) {
    const std::string ck = t.parent_checkpoint_uuid().empty() ? "pending" : t.parent_checkpoint_uuid();
    kv.push_back({"Parent (pbt)", absl::StrCat("trial ", t.parent_trial_id(), ", checkpoint ", ck)});
  }
  PrintKeyValues(io.out, kv);
  return 0;
}

int ExperimentSetGcPolicy(Client& client, int64_t experiment_id, const GcPolicyArgs& args, const CommandIo& io) {
  v1::GetExperimentRequest get;
  get.set_experiment_id(experiment_id);
  v1::GetExperimentResponse current;
  grpc::Status status = client.Call(&Stub::GetExperiment, get, &current);
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::PatchExperimentRequest req;
  req.set_experiment_id(experiment_id);
  v1::CheckpointGcPolicy* p = req.mutable_checkpoint_gc_policy();
  *p = current.experiment().checkpoint_gc_policy();
  if (args.save_experiment_best) p->set_save_experiment_best(*args.save_experiment_best);
  if (args.save_trial_best) p->set_save_trial_best(*args.save_trial_best);
  if (args.save_trial_latest) p->set_save_trial_latest(*args.save_trial_latest);
  v1::PatchExperimentResponse resp;
  status = client.Call(&Stub::PatchExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  const auto& q = resp.experiment().checkpoint_gc_policy();
  io.out << "Experiment " << experiment_id << " checkpoint GC policy: save_experiment_best "
         << q.save_experiment_best() << ", save_trial_best " << q.save_trial_best() << ", save_trial_latest "
         << q.save_trial_latest() << '\n';
  return 0;
}

int TrialKill(Client& client, int64_t trial_id, const CommandIo& io) {
  v1::KillTrialRequest req;
  req.set_trial_id(trial_id);
  v1::KillTrialResponse resp;
  grpc::Status status = client.Call(&Stub::KillTrial, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Killed trial " << trial_id << '\n';
  return 0;
}

// ------------------------------------------------------------- checkpoints

int CheckpointDescribe(Client& client, const std::string& uuid, const CommandIo& io) {
  v1::GetCheckpointRequest req;
  req.set_checkpoint_uuid(uuid);
  v1::GetCheckpointResponse resp;
  grpc::Status status = client.Call(&Stub::GetCheckpoint, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  const v1::Checkpoint& c = resp.checkpoint();
  PrintKeyValues(io.out, {
                             {"UUID", c.uuid()},
                             {"Experiment", absl::StrCat(c.experiment_id())},
                             {"Trial", absl::StrCat(c.trial_id())},
                             {"State", EnumLabel(v1::CheckpointState_Name(c.state()), "CHECKPOINT_STATE_")},
                             {"Batches", absl::StrCat(c.total_batches())},
                             {"Records", absl::StrCat(c.total_records())},
                             {"Epochs", EpochsText(c)},
                             {"Validation", FormatMetrics(c.validation_metrics())},
                             {"Searcher metric", c.has_searcher_metric() ? FormatDouble(c.searcher_metric()) : ""},
                             {"Size", FormatBytes(c.size_bytes())},
                             {"Storage path", c.storage_path()},
                             {"Allocation", c.allocation_id()},
                             {"Report time", FormatTime(c.report_time())},
                             {"Metadata", StructJson(c.metadata())},
                         });
  if (!c.resources().empty()) {
    io.out << "\nFiles:\n";
    std::map<std::string, int64_t> files(c.resources().begin(), c.resources().end());
    Table t({"PATH", "SIZE"});
    for (const auto& [path, size] : files) t.AddRow({path, FormatBytes(size)});
    t.Print(io.out);
  }
  return 0;
}

// ----------------------------------------------------------------- cluster

int AgentList(Client& client, const CommandIo& io) {
  v1::GetAgentsRequest req;
  req.set_include_disconnected(true);
  v1::GetAgentsResponse resp;
  grpc::Status status = FetchAll(client, &Stub::GetAgents, req, &resp,
                                 [](v1::GetAgentsResponse& r) { return r.mutable_agents(); });
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  Table t({"ID", "HOSTNAME", "RESOURCE POOL", "SLOTS", "IN USE", "CONNECTED", "ENABLED", "VERSION", "LAST HEARTBEAT"});
  for (const auto& a : resp.agents()) {
    int used = 0;
    for (const auto& s : a.slots()) used += s.allocation_id().empty() ? 0 : 1;
    std::string enabled = FormatBool(a.enabled());
    if (a.draining()) enabled += " (draining)";
    t.AddRow({a.id(), a.hostname(), a.resource_pool(), absl::StrCat(a.slots_size()), absl::StrCat(used),
              FormatBool(a.connected()), enabled, a.version(), FormatTime(a.last_heartbeat_time())});
  }
  t.Print(io.out);
  return 0;
}

int SlotList(Client& client, const std::string& agent_id, const CommandIo& io) {
  v1::GetSlotsResponse slots;
  if (!agent_id.empty()) {
    v1::GetSlotsRequest req;
    req.set_agent_id(agent_id);
    grpc::Status status = client.Call(&Stub::GetSlots, req, &slots);
    if (!status.ok()) return ReportError(client, status, io.err);
  } else {
    v1::GetAgentsRequest req;
    v1::GetAgentsResponse agents;
    grpc::Status status = FetchAll(client, &Stub::GetAgents, req, &agents,
                                   [](v1::GetAgentsResponse& r) { return r.mutable_agents(); });
    if (!status.ok()) return ReportError(client, status, io.err);
    for (auto& a : *agents.mutable_agents()) {
      for (auto& s : *a.mutable_slots()) {
        if (s.agent_id().empty()) s.set_agent_id(a.id());
        slots.add_slots()->Swap(&s);
      }
    }
  }
  if (io.json) {
    PrintJson(slots, io.out);
    return 0;
  }
  Table t({"AGENT", "SLOT", "TYPE", "DEVICE", "ENABLED", "ALLOCATION", "TRIAL"});
  for (const auto& s : slots.slots()) {
    std::string enabled = FormatBool(s.enabled());
    if (s.draining()) enabled += " (draining)";
    t.AddRow({s.agent_id(), s.id(), EnumLabel(v1::DeviceType_Name(s.device().type()), "DEVICE_TYPE_"),
              s.device().brand(), enabled, s.allocation_id(), s.trial_id() == 0 ? "" : absl::StrCat(s.trial_id())});
  }
  t.Print(io.out);
  return 0;
}

int PreviewSearch(Client& client, const std::string& config_path, bool show_trials, const CommandIo& io) {
  v1::PreviewSearchRequest req;
  if (!ReadFileBytes(config_path, req.mutable_config_yaml())) {
    io.err << "det-cli: error: cannot read " << config_path << '\n';
    return 2;
  }
  if (std::string bad = NotUtf8Error(config_path, req.config_yaml()); !bad.empty()) {
    io.err << "det-cli: error: " << TerminalText(bad) << '\n';
    return 2;
  }
  v1::PreviewSearchResponse resp;
  grpc::Status status = client.Call(&Stub::PreviewSearch, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  for (const auto& w : resp.warnings()) io.err << "det-cli: warning: " << TerminalText(w, kKeepLayout) << '\n';
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << TerminalText(resp.summary(), kKeepLayout);
  if (show_trials) {
    Table t({"TRIAL", "VALIDATES AT (" + resp.length_unit() + ")", "BATCHES", "STOPPED EARLY", "HPARAMS"});
    for (const auto& tr : resp.trials()) {  // BATCHES "-": they differ per trial
      t.AddRow({absl::StrCat(tr.request_id()), absl::StrJoin(tr.validation_points(), ","),
                tr.total_batches() > 0 ? absl::StrCat(tr.total_batches()) : "-", FormatBool(tr.stopped_early()),
                StructJson(tr.hparams())});
    }
    t.Print(io.out);
  }
  return 0;
}

int MasterInfo(Client& client, const CommandIo& io) {
  v1::GetMasterRequest req;
  v1::GetMasterResponse resp;
  grpc::Status status = client.Call(&Stub::GetMaster, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  PrintKeyValues(io.out, {
                             {"Master", client.options().master},
                             {"Version", resp.version()},
                             {"Cluster name", resp.cluster_name()},
                             {"Cluster ID", resp.cluster_id()},
                             {"Master ID", resp.master_id()},
                             {"Start time", FormatTime(resp.start_time())},
                             {"Uptime", FormatDuration(resp.uptime())},
                             {"Auth required", FormatBool(resp.auth_required())},
                             {"Trial ABI version", absl::StrCat(resp.trial_abi_version())},
                             {"Max request size", FormatBytes(resp.max_request_bytes())},
                         });
  return 0;
}

}  // namespace det::cli
