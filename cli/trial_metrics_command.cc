#include "cli/trial_metrics_command.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/table.h"
#include "cli/terminal_text.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

void PrintTable(const std::vector<v1::MetricsReport>& reports, std::ostream& out) {
  std::set<std::string> names;
  for (const auto& r : reports) {
    for (const auto& [k, v] : r.metrics()) names.insert(k);
  }
  std::vector<std::string> headers = {"BATCHES", "GROUP", "EPOCHS", "END TIME"};
  headers.insert(headers.end(), names.begin(), names.end());
  Table t(headers);
  for (const auto& r : reports) {
    std::vector<std::string> row = {absl::StrCat(r.total_batches()), r.group(), FormatDouble(r.total_epochs()),
                                    FormatTime(r.end_time())};
    for (const auto& name : names) {
      auto it = r.metrics().find(name);
      row.push_back(it == r.metrics().end() ? "" : FormatDouble(it->second));
    }
    t.AddRow(std::move(row));
  }
  t.Print(out);
}

v1::GetTrialMetricsRequest RequestOf(int64_t trial_id, const TrialMetricsArgs& args) {
  v1::GetTrialMetricsRequest req;
  req.set_trial_id(trial_id);
  req.set_group(args.group);
  for (const auto& n : args.metric_names) req.add_metric_names(n);
  return req;
}

// --full: pages through every report in (total_batches, id) order.
int Full(Client& client, int64_t trial_id, const TrialMetricsArgs& args, const CommandIo& io) {
  v1::GetTrialMetricsRequest req = RequestOf(trial_id, args);
  req.set_full_resolution(true);
  req.set_limit(args.page_size);
  std::vector<v1::MetricsReport> reports;
  for (;;) {
    v1::GetTrialMetricsResponse resp;
    grpc::Status status = client.Call(&Stub::GetTrialMetrics, req, &resp);
    if (!status.ok()) return ReportError(client, status, io.err);
    for (auto& r : *resp.mutable_metrics()) {
      if (io.json) {
        PrintJson(r, io.out, /*pretty=*/false);
      } else if (static_cast<int64_t>(reports.size()) >= kMaxFullTableReports) {
        io.err << "det-cli: error: trial " << trial_id << " has more than " << kMaxFullTableReports
               << " matching reports, too many for a table; --json prints them one per line as they arrive, "
                  "or narrow them with --group / --metric\n";
        return 1;
      } else {
        reports.push_back(std::move(r));
      }
    }
    io.out.flush();
    // A page that moves the cursor nowhere would ask for itself again.
    const bool moved = resp.next_after_total_batches() != req.after_total_batches() ||
                       resp.next_after_id() != req.after_id();
    if (!resp.has_more() || !moved) break;
    req.set_after_total_batches(resp.next_after_total_batches());
    req.set_after_id(resp.next_after_id());
  }
  if (!io.json) PrintTable(reports, io.out);
  return 0;
}

// --follow: "BATCHES GROUP name=value ..." (or a JSON line) per report, in
// storage order, until the master ends the stream (the trial is terminal).
int Follow(Client& client, int64_t trial_id, const TrialMetricsArgs& args, const CommandIo& io) {
  v1::StreamTrialMetricsRequest req;
  req.set_trial_id(trial_id);
  req.set_group(args.group);
  for (const auto& n : args.metric_names) req.add_metric_names(n);
  req.set_follow(true);
  grpc::ClientContext ctx;
  client.PrepareContext(&ctx, /*streaming=*/true);
  auto reader = client.stub().StreamTrialMetrics(&ctx, req);
  v1::StreamTrialMetricsResponse resp;
  while (reader->Read(&resp)) {
    for (const auto& r : resp.metrics()) {
      if (io.json) {
        PrintJson(r, io.out, /*pretty=*/false);
      } else {
        io.out << r.total_batches() << ' ' << TerminalText(r.group()) << ' ' << TerminalText(FormatMetrics(r.metrics()))
               << (r.archived() ? " (archived)" : "") << '\n';
      }
    }
    io.out.flush();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return ReportError(client, status, io.err);
  return 0;
}

}  // namespace

int TrialMetrics(Client& client, int64_t trial_id, const TrialMetricsArgs& args, const CommandIo& io) {
  if (args.follow) return Follow(client, trial_id, args, io);
  if (args.full) return Full(client, trial_id, args, io);
  v1::GetTrialMetricsRequest req = RequestOf(trial_id, args);
  v1::GetTrialMetricsResponse resp;
  grpc::Status status = client.Call(&Stub::GetTrialMetrics, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (resp.downsampled()) {
    io.err << "det-cli: note: trial " << trial_id
           << " has more reports than the chart view holds (1,000 points per metric); the extremes of each "
              "stretch are kept. --full prints every report\n";
  }
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  PrintTable({resp.metrics().begin(), resp.metrics().end()}, io.out);
  return 0;
}

}  // namespace det::cli
