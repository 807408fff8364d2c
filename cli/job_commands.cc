// det-cli: job list, job update, experiment set priority|weight|max-slots.
#include "cli/job_commands.h"

#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/table.h"
#include "cli/terminal_text.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

constexpr int kPageSize = 1000;
// At most this many pages (a million jobs) are fetched by job list.
constexpr int kMaxPages = 1000;

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string JobStateLabel(v1::JobState s) {
  std::string name = v1::JobState_Name(s);
  return name.rfind("JOB_STATE_", 0) == 0 ? name.substr(10) : name;
}

std::string MaxSlots(int32_t max_slots) { return max_slots > 0 ? absl::StrCat(max_slots) : "-"; }

// Every page of the queue (of `pool` when not empty) into `all`.
grpc::Status FetchQueue(Client& client, const std::string& pool, v1::GetJobQueueResponse* all) {
  v1::GetJobQueueRequest req;
  req.set_resource_pool(pool);
  req.set_limit(kPageSize);
  for (int page = 0; page < kMaxPages; ++page) {
    v1::GetJobQueueResponse resp;
    grpc::Status status = client.Call(&Stub::GetJobQueue, req, &resp);
    if (!status.ok()) return status;
    for (auto& j : *resp.mutable_jobs()) *all->add_jobs() = std::move(j);
    *all->mutable_pagination() = resp.pagination();
    if (resp.pagination().end_index() >= resp.pagination().total() || resp.pagination().end_index() <= req.offset()) {
      break;
    }
    req.set_offset(resp.pagination().end_index());
  }
  auto* p = all->mutable_pagination();
  p->set_offset(0);
  p->set_start_index(0);
  p->set_end_index(all->jobs_size());
  p->set_limit(all->jobs_size());
  return grpc::Status::OK;
}

void PrintJob(const v1::Job& j, std::ostream& out) {
  out << "Job " << j.job_id() << ": position " << j.queue_position() << " in pool " << TerminalText(j.resource_pool()) << ", "
      << JobStateLabel(j.state()) << ", priority " << j.priority() << ", weight " << Number(j.weight())
      << ", max slots " << (j.max_slots() > 0 ? absl::StrCat(j.max_slots()) : "no cap") << '\n';
}

int Update(Client& client, const v1::UpdateJobRequest& req, const CommandIo& io) {
  v1::UpdateJobResponse resp;
  grpc::Status status = client.Call(&Stub::UpdateJob, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  PrintJob(resp.job(), io.out);
  return 0;
}

int UsageError(const std::string& message, const CommandIo& io) {
  io.err << "det-cli: error: " << message << '\n';
  return 2;
}

}  // namespace

std::string NormalizeJobId(const std::string& job) {
  int64_t id = 0;
  if (absl::SimpleAtoi(job, &id) && id > 0) return absl::StrCat("exp-", id);
  return job;
}

int JobList(Client& client, const std::string& pool, const CommandIo& io) {
  v1::GetJobQueueResponse all;
  grpc::Status status = FetchQueue(client, pool, &all);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(all, io.out);
    return 0;
  }
  Table t({"POS", "JOB", "EXPERIMENT", "NAME", "USER", "POOL", "STATE", "PRIORITY", "WEIGHT", "MAX SLOTS",
           "SLOTS (REQ/ALLOC)"});
  for (const auto& j : all.jobs()) {
    t.AddRow({absl::StrCat(j.queue_position()), j.job_id(), absl::StrCat(j.experiment_id()), j.name(), j.username(),
              j.resource_pool(), JobStateLabel(j.state()), absl::StrCat(j.priority()), Number(j.weight()),
              MaxSlots(j.max_slots()), absl::StrCat(j.requested_slots(), "/", j.allocated_slots())});
  }
  t.Print(io.out);
  return 0;
}

int JobUpdate(Client& client, const std::string& job, const JobUpdateArgs& args, const CommandIo& io) {
  if (!args.priority && !args.weight && !args.max_slots && args.ahead_of.empty() && args.behind.empty()) {
    return UsageError("nothing to change: give --priority, --weight, --max-slots, --ahead-of or --behind", io);
  }
  v1::UpdateJobRequest req;
  req.set_job_id(NormalizeJobId(job));
  if (args.priority) req.set_priority(*args.priority);
  if (args.weight) req.set_weight(*args.weight);
  if (args.max_slots) req.set_max_slots(*args.max_slots);
  if (!args.ahead_of.empty()) req.set_ahead_of(NormalizeJobId(args.ahead_of));
  if (!args.behind.empty()) req.set_behind(NormalizeJobId(args.behind));
  return Update(client, req, io);
}

int ExperimentSetJobKnob(Client& client, int64_t experiment_id, const std::string& knob, const std::string& value,
                         const CommandIo& io) {
  v1::UpdateJobRequest req;
  req.set_job_id(absl::StrCat("exp-", experiment_id));
  const std::string v(absl::StripAsciiWhitespace(value));
  int32_t n = 0;
  double w = 0;
  if (knob == "priority" && absl::SimpleAtoi(v, &n)) {
    req.set_priority(n);
  } else if (knob == "max-slots" && absl::SimpleAtoi(v, &n)) {
    req.set_max_slots(n);
  } else if (knob == "weight" && absl::SimpleAtod(v, &w)) {
    req.set_weight(w);
  } else {
    return UsageError(absl::StrCat(knob, ": '", value.substr(0, 64), "' is not ",
                                   knob == "weight" ? "a number" : "an integer"),
                      io);
  }
  return Update(client, req, io);
}

void AddJobCommands(CLI::App& app, const std::function<void(JobCommand)>& set_run) {
  struct Options {
    std::string pool;
    std::string job;
    JobUpdateArgs update;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  auto* job = app.add_subcommand("job", "The job queue: list jobs, change their priority, weight or place")
                  ->require_subcommand(1);
  auto* list = job->add_subcommand("list", "List the job queue per resource pool, in scheduling order");
  list->add_option("--pool", o->pool, "Only this resource pool's queue");
  list->add_flag("--json", o->json, "Print the response as protobuf JSON");
  list->callback([o, set_run] {
    set_run([o](Client& c, const CommandIo& io) {
      return JobList(c, o->pool, CommandIo{io.out, io.err, io.json || o->json});
    });
  });
  auto* update = job->add_subcommand("update", "Change a job's priority, weight, max slots or place in the queue");
  update->add_option("JOB_ID", o->job, "Job id (exp-<id> or the experiment id)")->required();
  update->add_option("--priority", o->update.priority, "1..99, lower runs first");
  update->add_option("--weight", o->update.weight, "Fair share within a priority (> 0)");
  update->add_option("--max-slots", o->update.max_slots, "Most slots held at once (0: no cap)");
  auto* ahead = update->add_option("--ahead-of", o->update.ahead_of, "Move just ahead of this job (takes its priority)");
  auto* behind = update->add_option("--behind", o->update.behind, "Move just behind this job (takes its priority)");
  ahead->excludes(behind);
  update->add_flag("--json", o->json, "Print the response as protobuf JSON");
  update->callback([o, set_run] {
    set_run([o](Client& c, const CommandIo& io) {
      return JobUpdate(c, o->job, o->update, CommandIo{io.out, io.err, io.json || o->json});
    });
  });
}

}  // namespace det::cli
