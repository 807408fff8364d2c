#include "cli/experiment_best_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/checkpoint_commands.h"
#include "cli/table.h"
#include "cli/terminal_text.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;
using Command = std::function<int(Client&, const CommandIo&)>;

// The experiment (for its metric's name and sense) and its `n` best
// COMPLETED checkpoints, best first.
grpc::Status FetchBest(Client& client, int64_t experiment_id, int n, v1::Experiment* experiment,
                       v1::GetExperimentCheckpointsResponse* best) {
  v1::GetExperimentRequest ereq;
  ereq.set_experiment_id(experiment_id);
  v1::GetExperimentResponse eresp;
  grpc::Status status = client.Call(&Stub::GetExperiment, ereq, &eresp);
  if (!status.ok()) return status;
  *experiment = eresp.experiment();
  v1::GetExperimentCheckpointsRequest req;
  req.set_experiment_id(experiment_id);
  req.set_sort_by(v1::GetExperimentCheckpointsRequest::SORT_BY_SEARCHER_METRIC);
  req.set_order_by(v1::ORDER_BY_ASC);
  req.add_states(v1::CHECKPOINT_STATE_COMPLETED);
  req.set_limit(n);
  status = client.Call(&Stub::GetExperimentCheckpoints, req, best);
  // A master that answers more than asked is cut to `n`.
  while (status.ok() && best->checkpoints_size() > n) best->mutable_checkpoints()->RemoveLast();
  return status;
}

// "validation_loss (smaller is better)".
std::string MetricSense(const v1::Experiment& e) {
  return absl::StrCat(e.searcher_metric().empty() ? "the searcher metric" : e.searcher_metric(), " (",
                      e.smaller_is_better() ? "smaller" : "larger", " is better)");
}

std::string MetricText(const v1::Checkpoint& c) {
  return c.has_searcher_metric() ? FormatDouble(c.searcher_metric()) : "-";
}

// "Best 2 of 6 completed checkpoints of experiment 3 by validation_loss (smaller is better):".
std::string Heading(int64_t experiment_id, const v1::Experiment& e, const v1::GetExperimentCheckpointsResponse& r) {
  return absl::StrCat("Best ", r.checkpoints_size(), " of ", r.pagination().total(),
                      " completed checkpoints of experiment ", experiment_id, " by ", MetricSense(e), ":");
}

// An RFC 4122 uuid as the master writes them: 8-4-4-4-12 lower-case hex.
bool IsUuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !(absl::ascii_isdigit(s[i]) || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  }
  return true;
}

// "1.2 MiB" (as checkpoint describe prints sizes).
std::string FormatSize(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  for (; v >= 1024 && u < 4; ++u) v /= 1024;
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrCat(absl::StrFormat("%.1f", v), " ", units[u]);
}

int Fail(const CommandIo& io, const std::string& message, int code = 1) {
  io.err << "det-cli: error: " << message << '\n';
  return code;
}

// Every checkpoint's uuid is a uuid and DIR/<uuid> does not exist; the
// error otherwise ("" when all is well).
std::string CheckTargets(const v1::GetExperimentCheckpointsResponse& best, const std::filesystem::path& dir) {
  for (const auto& c : best.checkpoints()) {
    if (!IsUuid(c.uuid())) {
      return absl::StrCat("the master sent a checkpoint uuid that is not a uuid: '", c.uuid().substr(0, 64),
                          "'; nothing downloaded");
    }
    struct stat st;
    const std::filesystem::path target = dir / c.uuid();
    if (lstat(target.c_str(), &st) == 0) {
      return absl::StrCat(target.string(), " already exists: not overwriting it; nothing downloaded (remove it, or "
                          "pick another -o DIR)");
    }
    if (errno != ENOENT) {
      return absl::StrCat("cannot check ", target.string(), ": ", std::strerror(errno), "; nothing downloaded");
    }
  }
  return "";
}

}  // namespace

std::string CheckBestCount(const std::string& flag, const std::string& value) {
  int64_t n = 0;
  if (absl::SimpleAtoi(value, &n) && n >= 1 && n <= kMaxBestCheckpoints) return "";
  return absl::StrCat(flag, " must be a whole number from 1 to ", kMaxBestCheckpoints,
                      " (how many of the best checkpoints), got '", value.substr(0, 64), "'");
}

int ExperimentListBestCheckpoints(Client& client, int64_t experiment_id, int best, const CommandIo& io) {
  if (std::string bad = CheckBestCount("--best", std::to_string(best)); !bad.empty()) return Fail(io, bad, 2);
  v1::Experiment experiment;
  v1::GetExperimentCheckpointsResponse resp;
  grpc::Status status = FetchBest(client, experiment_id, best, &experiment, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << TerminalText(Heading(experiment_id, experiment, resp)) << '\n';
  Table t({"RANK", "UUID", "TRIAL", "BATCHES", experiment.searcher_metric().empty() ? "METRIC"
                                                                                   : experiment.searcher_metric(),
           "SIZE"});
  int rank = 0;
  for (const auto& c : resp.checkpoints()) {
    t.AddRow({absl::StrCat(++rank), c.uuid(), absl::StrCat(c.trial_id()), absl::StrCat(c.total_batches()),
              MetricText(c), FormatSize(c.size_bytes())});
  }
  t.Print(io.out);
  return 0;
}

int ExperimentDownloadTopN(Client& client, int64_t experiment_id, int top_n, const std::string& dir,
                           const CommandIo& io) {
  if (std::string bad = CheckBestCount("--top-n", std::to_string(top_n)); !bad.empty()) return Fail(io, bad, 2);
  if (dir.empty()) return Fail(io, "-o DIR must not be empty", 2);
  v1::Experiment experiment;
  v1::GetExperimentCheckpointsResponse best;
  grpc::Status status = FetchBest(client, experiment_id, top_n, &experiment, &best);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (best.checkpoints().empty()) {
    return Fail(io, absl::StrCat("experiment ", experiment_id, " has no completed checkpoint yet"));
  }
  const std::filesystem::path root(dir);
  if (std::string bad = CheckTargets(best, root); !bad.empty()) return Fail(io, bad);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return Fail(io, absl::StrCat("cannot create ", dir, ": ", ec.message()));
  io.out << TerminalText(Heading(experiment_id, experiment, best)) << '\n';
  int rank = 0;
  for (const auto& c : best.checkpoints()) {
    const std::filesystem::path target = root / c.uuid();
    // mkdir, not "mkdir -p": one that appeared since the check is refused.
    if (mkdir(target.c_str(), 0755) != 0) {
      return Fail(io, absl::StrCat(target.string(), ": cannot create it (", std::strerror(errno),
                                   "): not overwriting anything"));
    }
    io.out << '#' << ++rank << " trial " << c.trial_id() << ", batch " << c.total_batches() << ", "
           << (experiment.searcher_metric().empty() ? "metric" : TerminalText(experiment.searcher_metric())) << ' '
           << MetricText(c) << ": " << c.uuid() << " -> " << target.string() << '\n';
    if (CheckpointDownload(client, c.uuid(), target.string(), io) != 0) {
      return Fail(io, absl::StrCat("downloading checkpoint ", c.uuid(), " into ", target.string(),
                                   " failed; remove that directory before you run this again"));
    }
  }
  if (best.checkpoints_size() < top_n) {
    io.out << "Experiment " << experiment_id << " has " << best.checkpoints_size() << " completed checkpoint(s), "
           << "fewer than --top-n " << top_n << '\n';
  }
  return 0;
}

void AddExperimentBestCommands(CLI::App* experiment, ExperimentBestArgs& args,
                               std::function<void(Command)> set_run) {
  auto count = [](const std::string& flag) {
    // CLI11 prefixes "FLAG: ": "--best: must be a whole number ...".
    return CLI::Validator(
        [flag](std::string& value) {
          std::string bad = CheckBestCount(flag, value);
          return bad.empty() ? bad : bad.substr(flag.size() + 1);
        },
        absl::StrCat("1..", kMaxBestCheckpoints));
  };
  auto* list = experiment->add_subcommand(
      "list-checkpoints", "List an experiment's checkpoints (--best N: the N best by the searcher metric)");
  list->add_option("EXPERIMENT_ID", args.id, "Experiment id")->required();
  list->add_option("--best", args.best,
                   "Only the N best COMPLETED checkpoints, best first (searcher metric, smaller_is_better honoured)")
      ->check(count("--best"));
  list->add_flag("--json", args.json, "Print the response as protobuf JSON");
  list->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) {
      CommandIo shown{io.out, io.err, args.json, io.out_is_terminal};
      if (args.best) return ExperimentListBestCheckpoints(c, args.id, *args.best, shown);
      return ExperimentListCheckpoints(c, args.id, shown);
    });
  });
  auto* download = experiment->add_subcommand(
      "download", "Download the N best checkpoints (searcher metric) into DIR/<uuid>/, as Determined's --top-n");
  download->add_option("EXPERIMENT_ID", args.id, "Experiment id")->required();
  download->add_option("--top-n", args.top_n, "How many of the best COMPLETED checkpoints (1..1000)")
      ->required()
      ->check(count("--top-n"));
  download->add_option("-o,--output", args.output_dir, "Directory to write into (created; DIR/<uuid> must not exist)")
      ->required();
  download->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) {
      return ExperimentDownloadTopN(c, args.id, args.top_n, args.output_dir, io);
    });
  });
}

}  // namespace det::cli
