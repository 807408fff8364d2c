#include "cli/metrics_log_commands.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/table.h"
#include "cli/terminal_text.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;

constexpr const char* kRawHelp =
    "Print lines as stored; without it, control characters (ESC, CR, ...) show as escapes like \\x1b";

// "warning", "WARNING" or "LOG_LEVEL_WARNING" -> LOG_LEVEL_WARNING.
bool ParseLevel(const std::string& text, v1::LogLevel* level) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "WARN") upper = "WARNING";
  if (upper.rfind("LOG_LEVEL_", 0) != 0) upper = "LOG_LEVEL_" + upper;
  return v1::LogLevel_Parse(upper, level);
}

// RFC 3339 or Unix seconds.
bool ParseTimestamp(const std::string& text, google::protobuf::Timestamp* ts) {
  int64_t secs;
  if (absl::SimpleAtoi(text, &secs)) {
    ts->set_seconds(secs);
    return true;
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return false;
  const absl::Duration since_epoch = t - absl::UnixEpoch();
  ts->set_seconds(absl::ToInt64Seconds(since_epoch));
  ts->set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(since_epoch - absl::Seconds(ts->seconds()))));
  return true;
}

std::string FormatMasterLog(const v1::MasterLogEntry& e, bool raw) {
  std::string level = v1::LogLevel_Name(e.level());
  if (level.rfind("LOG_LEVEL_", 0) == 0) level = level.substr(10);
  return absl::StrCat("[", FormatTime(e.timestamp()), "] ", level, ": ", raw ? e.message() : TerminalText(e.message()));
}

}  // namespace

bool TrialLogsRequestOf(int64_t trial_id, const TrialLogFilterArgs& args, v1::TrialLogsRequest* req,
                        std::string* error) {
  req->set_trial_id(trial_id);
  req->set_follow(args.follow);
  for (int32_t r : args.ranks) req->add_ranks(r);
  for (const auto& l : args.levels) {
    v1::LogLevel level;
    if (!ParseLevel(l, &level)) {
      *error = absl::StrCat("--level: unknown level '", l, "' (trace, debug, info, warning, error, critical)");
      return false;
    }
    req->add_levels(level);
  }
  for (const auto& s : args.stdtypes) {
    if (s != "stdout" && s != "stderr") {
      *error = absl::StrCat("--stdtype: '", s, "' is neither stdout nor stderr");
      return false;
    }
    req->add_stdtypes(s == "stdout" ? v1::STD_TYPE_STDOUT : v1::STD_TYPE_STDERR);
  }
  req->set_search_text(args.grep);
  req->set_tail(args.tail);
  if (!args.since.empty() && !ParseTimestamp(args.since, req->mutable_since())) {
    *error = absl::StrCat("--since: not an RFC 3339 time or Unix seconds: '", args.since, "'");
    return false;
  }
  if (!args.until.empty() && !ParseTimestamp(args.until, req->mutable_until())) {
    *error = absl::StrCat("--until: not an RFC 3339 time or Unix seconds: '", args.until, "'");
    return false;
  }
  return true;
}

grpc::Status StreamTrialLogs(Client& client, const v1::TrialLogsRequest& req, bool with_trial, const CommandIo& io) {
  grpc::ClientContext ctx;
  client.PrepareContext(&ctx, /*streaming=*/req.follow());
  auto reader = client.stub().TrialLogs(&ctx, req);
  v1::TrialLogsResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& log : resp.logs()) {
      if (io.json) {
        PrintJson(log, io.out, /*pretty=*/false);
      } else {
        io.out << FormatLog(log, with_trial, io.raw) << '\n';
      }
    }
    io.out.flush();
  }
  return reader->Finish();
}

grpc::Status StreamTrialLogs(Client& client, int64_t trial_id, bool follow, bool with_trial, const CommandIo& io) {
  v1::TrialLogsRequest req;
  req.set_trial_id(trial_id);
  req.set_follow(follow);
  return StreamTrialLogs(client, req, with_trial, io);
}

int TrialLogs(Client& client, int64_t trial_id, const TrialLogFilterArgs& args, const CommandIo& io) {
  v1::TrialLogsRequest req;
  std::string error;
  if (!TrialLogsRequestOf(trial_id, args, &req, &error)) {
    io.err << "det-cli: error: " << error << '\n';
    return 2;
  }
  CommandIo log_io = io;
  log_io.raw = args.raw;
  grpc::Status status = StreamTrialLogs(client, req, /*with_trial=*/false, log_io);
  if (!status.ok()) return ReportError(client, status, io.err);
  return 0;
}

int ExperimentValidationHistory(Client& client, int64_t experiment_id, const CommandIo& io) {
  v1::GetExperimentValidationHistoryRequest req;
  req.set_experiment_id(experiment_id);
  v1::GetExperimentValidationHistoryResponse resp;
  grpc::Status status = client.Call(&Client::Stub::GetExperimentValidationHistory, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  Table t({"TRIAL", "BATCHES", "END TIME", "SEARCHER METRIC"});
  for (const auto& e : resp.validation_history()) {
    char metric[64];
    std::snprintf(metric, sizeof(metric), "%.6g", e.searcher_metric());
    t.AddRow({absl::StrCat(e.trial_id()), absl::StrCat(e.total_batches()), FormatTime(e.end_time()), metric});
  }
  t.Print(io.out);
  return 0;
}

int MasterLogs(Client& client, const MasterLogArgs& args, const CommandIo& io) {
  v1::MasterLogsRequest req;
  req.set_follow(args.follow);
  req.set_tail(args.tail);
  req.set_search_text(args.grep);
  for (const auto& l : args.levels) {
    v1::LogLevel level;
    if (!ParseLevel(l, &level)) {
      io.err << "det-cli: error: --level: unknown level '" << l << "'\n";
      return 2;
    }
    req.add_levels(level);
  }
  grpc::ClientContext ctx;
  client.PrepareContext(&ctx, /*streaming=*/args.follow);
  auto reader = client.stub().MasterLogs(&ctx, req);
  v1::MasterLogsResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& e : resp.logs()) {
      if (io.json) {
        PrintJson(e, io.out, /*pretty=*/false);
      } else {
        io.out << FormatMasterLog(e, args.raw) << '\n';
      }
    }
    io.out.flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return ReportError(client, status, io.err);
  return 0;
}

void AddMetricsLogCommands(CLI::App& app, int64_t* id, bool* json, CliCommand* run) {
  static TrialLogFilterArgs logs;  // one command per det-cli process
  static MasterLogArgs master_logs;
  auto add_json = [json](CLI::App* sub) { sub->add_flag("--json", *json, "Print the response as protobuf JSON"); };

  CLI::App* trial_logs = app.get_subcommand("trial")->add_subcommand("logs", "Print a trial's logs, filtered");
  trial_logs->add_option("TRIAL_ID", *id, "Trial id")->required();
  trial_logs->add_flag("--follow,-f", logs.follow, "Keep printing new lines until the trial ends");
  trial_logs->add_option("--rank", logs.ranks, "Only this rank's lines (repeatable)");
  trial_logs->add_option("--level", logs.levels, "Only this level (repeatable): trace|debug|info|warning|error|critical");
  trial_logs->add_option("--stdtype", logs.stdtypes, "Only stdout or stderr (repeatable)");
  trial_logs->add_option("--grep", logs.grep, "Only lines containing this text (literal, case-sensitive)");
  trial_logs->add_option("--tail", logs.tail, "Only the last N matching lines (then new ones with --follow)")
      ->check(CLI::NonNegativeNumber);
  trial_logs->add_option("--since", logs.since, "Only lines at or after this time (RFC 3339 or Unix seconds)");
  trial_logs->add_option("--until", logs.until, "Only lines before this time (RFC 3339 or Unix seconds)");
  trial_logs->add_flag("--raw", logs.raw, kRawHelp);
  add_json(trial_logs);
  trial_logs->callback([id, run] {
    *run = [id](Client& c, const CommandIo& io) { return TrialLogs(c, *id, logs, io); };
  });

  CLI::App* history = app.get_subcommand("experiment")
                          ->add_subcommand("validation-history", "Print the validations that improved the best metric");
  history->add_option("EXPERIMENT_ID", *id, "Experiment id")->required();
  add_json(history);
  history->callback([id, run] {
    *run = [id](Client& c, const CommandIo& io) { return ExperimentValidationHistory(c, *id, io); };
  });

  CLI::App* mlogs = app.get_subcommand("master")->add_subcommand("logs", "Print the master's recent log (admins)");
  mlogs->add_flag("--follow,-f", master_logs.follow, "Keep printing new lines");
  mlogs->add_option("--tail", master_logs.tail, "Only the last N matching lines")->check(CLI::NonNegativeNumber);
  mlogs->add_option("--level", master_logs.levels, "Only this level (repeatable)");
  mlogs->add_option("--grep", master_logs.grep, "Only lines containing this text");
  mlogs->add_flag("--raw", master_logs.raw, kRawHelp);
  add_json(mlogs);
  mlogs->callback([run] { *run = [](Client& c, const CommandIo& io) { return MasterLogs(c, master_logs, io); }; });
}

}  // namespace det::cli
