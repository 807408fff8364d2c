// det-cli: archive, unarchive, delete, wait, set name|description|labels
// (and priority|weight|max-slots, cli/job_commands.h), label add|remove.
#include "cli/experiment_lifecycle_commands.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "cli/experiment_trial_so_command.h"
#include "cli/job_commands.h"
#include "common/utf8.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

bool IsTerminal(v1::State s) {
  return s == v1::STATE_COMPLETED || s == v1::STATE_CANCELED || s == v1::STATE_ERROR || s == v1::STATE_DELETING;
}

std::string StateName(v1::State s) {
  std::string name = v1::State_Name(s);
  return name.rfind("STATE_", 0) == 0 ? name.substr(6) : name;
}

int Patch(Client& client, const v1::PatchExperimentRequest& req, const std::string& what, const CommandIo& io) {
  v1::PatchExperimentResponse resp;
  grpc::Status status = client.Call(&Stub::PatchExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "Experiment " << req.experiment_id() << ": " << what << '\n';
  return 0;
}

std::string JoinLabels(const google::protobuf::RepeatedPtrField<std::string>& labels) {
  std::string out;
  for (const auto& l : labels) out += (out.empty() ? "" : ",") + l;
  return out;
}

}  // namespace

int ExperimentArchive(Client& client, int64_t experiment_id, bool archive, const CommandIo& io) {
  grpc::Status status;
  if (archive) {
    v1::ArchiveExperimentRequest req;
    req.set_experiment_id(experiment_id);
    v1::ArchiveExperimentResponse resp;
    status = client.Call(&Stub::ArchiveExperiment, req, &resp);
  } else {
    v1::UnarchiveExperimentRequest req;
    req.set_experiment_id(experiment_id);
    v1::UnarchiveExperimentResponse resp;
    status = client.Call(&Stub::UnarchiveExperiment, req, &resp);
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << (archive ? "Archived" : "Unarchived") << " experiment " << experiment_id << '\n';
  return 0;
}

int ExperimentDelete(Client& client, int64_t experiment_id, bool yes, std::istream& in, const CommandIo& io) {
  if (!yes) {
    io.err << "Delete experiment " << experiment_id
           << " with its checkpoints, metrics and logs? This cannot be undone. [y/N] " << std::flush;
    std::string answer;
    std::getline(in, answer);
    answer = absl::AsciiStrToLower(absl::StripAsciiWhitespace(answer));
    if (answer != "y" && answer != "yes") {
      io.err << "det-cli: experiment " << experiment_id << " not deleted\n";
      return 1;
    }
  }
  v1::DeleteExperimentRequest req;
  req.set_experiment_id(experiment_id);
  v1::DeleteExperimentResponse resp;
  grpc::Status status = client.Call(&Stub::DeleteExperiment, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Experiment " << experiment_id << " is DELETING; the master deletes it in the background\n";
  return 0;
}

int ExperimentSetField(Client& client, int64_t experiment_id, const std::string& field, const std::string& raw_value,
                       const CommandIo& io) {
  // proto3 strings are UTF-8: bytes that are not become U+FFFD here rather
  // than fail the whole request.
  const std::string value = Utf8Sanitized(raw_value);
  v1::PatchExperimentRequest req;
  req.set_experiment_id(experiment_id);
  if (field == "name") {
    req.set_name(value);
  } else if (field == "description") {
    req.set_description(value);
  } else if (field == "labels") {
    auto* labels = req.mutable_labels();
    for (absl::string_view l : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      labels->add_labels(std::string(absl::StripAsciiWhitespace(l)));
    }
  } else {
    io.err << "det-cli: error: unknown field '" << field << "' (name, description or labels)\n";
    return 2;
  }
  return Patch(client, req, field + " set", io);
}

int ExperimentLabel(Client& client, int64_t experiment_id, bool add, const std::string& raw_label,
                    const CommandIo& io) {
  const std::string label = Utf8Sanitized(raw_label);  // proto3 strings are UTF-8
  v1::GetExperimentRequest get;
  get.set_experiment_id(experiment_id);
  v1::GetExperimentResponse current;
  grpc::Status status = client.Call(&Stub::GetExperiment, get, &current);
  if (!status.ok()) return ReportError(client, status, io.err);
  v1::PatchExperimentRequest req;
  req.set_experiment_id(experiment_id);
  auto* labels = req.mutable_labels()->mutable_labels();
  for (const auto& l : current.experiment().labels()) {
    if (add || l != label) *labels->Add() = l;
  }
  if (add && std::find(labels->begin(), labels->end(), label) == labels->end()) *labels->Add() = label;
  return Patch(client, req, "labels " + JoinLabels(*labels), io);
}

int ExperimentWait(Client& client, int64_t experiment_id, const WaitArgs& args, const CommandIo& io) {
  const auto start = std::chrono::steady_clock::now();
  v1::GetExperimentRequest req;
  req.set_experiment_id(experiment_id);
  while (true) {
    v1::GetExperimentResponse resp;
    grpc::Status status = client.Call(&Stub::GetExperiment, req, &resp);
    if (!status.ok()) {
      ReportError(client, status, io.err);
      return 2;
    }
    const v1::State state = resp.experiment().state();
    if (IsTerminal(state)) {
      io.out << "Experiment " << experiment_id << " " << StateName(state) << '\n';
      return state == v1::STATE_COMPLETED ? 0 : 1;
    }
    if (args.timeout_seconds &&
        std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(*args.timeout_seconds)) {
      io.err << "det-cli: error: experiment " << experiment_id << " is still " << StateName(state) << " after "
             << *args.timeout_seconds << " s\n";
      return 2;
    }
    std::this_thread::sleep_for(args.poll_interval);
  }
}

void AddExperimentLifecycleCommands(CLI::App* experiment, LifecycleCommand* run) {
  struct Options {
    int64_t id = 0;
    bool yes = false;
    std::string value;
    double timeout = 0;
  };
  auto o = std::make_shared<Options>();
  auto id_command = [&](CLI::App* parent, const char* name, const char* help) {
    auto* sub = parent->add_subcommand(name, help);
    sub->add_option("EXPERIMENT_ID", o->id, "Experiment id")->required();
    return sub;
  };
  for (bool archive : {true, false}) {
    auto* sub = id_command(experiment, archive ? "archive" : "unarchive",
                           archive ? "Hide a terminal experiment from `experiment list`" : "Undo archive");
    sub->callback([o, run, archive] {
      *run = [o, archive](Client& c, const CommandIo& io) { return ExperimentArchive(c, o->id, archive, io); };
    });
  }
  auto* del = id_command(experiment, "delete", "Delete a terminal experiment with its checkpoints, metrics, logs");
  del->add_flag("--yes,-y", o->yes, "Do not ask for confirmation");
  del->callback([o, run] {
    *run = [o](Client& c, const CommandIo& io) { return ExperimentDelete(c, o->id, o->yes, std::cin, io); };
  });
  auto* wait = id_command(experiment, "wait", "Wait until an experiment ends (exit 0: COMPLETED, 1: other, 2: timeout)");
  auto* timeout = wait->add_option("--timeout", o->timeout, "Give up after S seconds (exit 2)")->check(CLI::PositiveNumber);
  wait->callback([o, run, timeout] {
    WaitArgs args;
    if (timeout->count() > 0) args.timeout_seconds = o->timeout;
    *run = [o, args](Client& c, const CommandIo& io) { return ExperimentWait(c, o->id, args, io); };
  });
  CLI::App* set = experiment->get_subcommand("set");
  for (const char* field : {"name", "description", "labels"}) {
    auto* sub = id_command(set, field, "Set the experiment's name, description or labels (comma-separated)");
    sub->add_option("VALUE", o->value, "The new value")->required();
    std::string f = field;
    sub->callback([o, run, f] {
      *run = [o, f](Client& c, const CommandIo& io) { return ExperimentSetField(c, o->id, f, o->value, io); };
    });
  }
  // priority | weight | max-slots: the job's knobs, through UpdateJob (cli/job_commands.h).
  for (const char* knob : {"priority", "weight", "max-slots"}) {
    auto* sub = id_command(set, knob, "Set the job's priority (1..99), weight (> 0) or max slots (0: no cap)");
    sub->add_option("VALUE", o->value, "The new value")->required();
    std::string k = knob;
    sub->callback([o, run, k] {
      *run = [o, k](Client& c, const CommandIo& io) { return ExperimentSetJobKnob(c, o->id, k, o->value, io); };
    });
  }
  AddExperimentSetTrialSoCommand(set, run);  // cli/experiment_trial_so_command.h
  auto* label = experiment->add_subcommand("label", "Add or remove one label")->require_subcommand(1);
  for (bool add : {true, false}) {
    auto* sub = id_command(label, add ? "add" : "remove", add ? "Add a label" : "Remove a label");
    sub->add_option("LABEL", o->value, "The label")->required();
    sub->callback([o, run, add] {
      *run = [o, add](Client& c, const CommandIo& io) { return ExperimentLabel(c, o->id, add, o->value, io); };
    });
  }
}

}  // namespace det::cli
