#include "bench/search_peers_sim.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "master/search/searcher.h"

extern char** environ;

namespace det {
namespace bench {
namespace {

using master::CloseTrialOp;
using master::CreateTrialOp;
using master::RequestId;
using master::SearcherOp;
using master::ValidateAfterOp;

// Whether a trial that trained to `trained` toward `target` validates now.
bool AtValidation(int64_t trained, int64_t target, int64_t period) {
  return trained == target || trained % period == 0;
}

// Trains every trial of `running` (state, target) to the next validation of
// any of them, no further than the budget allows; adds the batches to
// `total`. Returns the batches each trained (0: the budget is spent).
int64_t Advance(const SearchTask& task, const std::vector<std::pair<TrialState*, int64_t>>& running, int64_t& total,
                const SimOptions& o) {
  int64_t n = static_cast<int64_t>(running.size());
  int64_t step = -1;
  for (const auto& [s, target] : running) {
    int64_t next = std::min(target, (s->trained / o.period + 1) * o.period);
    step = step < 0 ? next - s->trained : std::min(step, next - s->trained);
  }
  if (n == 0 || step <= 0) return 0;
  if (total + step * n > o.budget) step = (o.budget - total) / n;
  if (step <= 0) return 0;
  for (const auto& [s, target] : running) task.Train(*s, s->trained + step);
  total += step * n;
  return step;
}

struct DetTrial {
  TrialState s;
  TrialState checkpoint;  // at its latest operation-end validation
  int64_t target = 0;
  bool pending = false;
  bool running = false;
  int64_t order = 0;
};

}  // namespace

absl::StatusOr<SearchRun> RunDetSearch(const SearchTask& task, const ExperimentConfig& config,
                                       const SimOptions& options) {
  absl::StatusOr<master::Searcher> created = master::Searcher::Create(config, kTaskMaxLength);
  if (!created.ok()) return created.status();
  master::Searcher& searcher = *created;
  SearchRun run;
  std::map<RequestId, DetTrial> trials;
  std::deque<SearcherOp> queue;
  int64_t order = 0;
  auto push = [&](std::vector<SearcherOp> ops) {
    for (auto& op : ops) queue.push_back(std::move(op));
  };
  auto drain = [&]() -> absl::Status {
    while (!queue.empty()) {
      SearcherOp op = std::move(queue.front());
      queue.pop_front();
      if (auto* c = std::get_if<CreateTrialOp>(&op)) {
        absl::StatusOr<TrialState> s = c->parent != 0 ? task.Fork(trials[c->parent].checkpoint, c->hparams,
                                                                  c->trial_seed)
                                                      : task.Start(c->hparams, c->trial_seed);
        if (!s.ok()) return absl::InternalError(absl::StrCat("task ", task.name(), ": ", s.status().message()));
        trials[c->request_id].s = *s;
        ++run.trials;
        push(searcher.TrialCreated(c->request_id));
      } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
        DetTrial& t = trials[v->request_id];
        t.target = v->length;
        t.pending = true;
        t.order = order++;
      } else if (auto* cl = std::get_if<CloseTrialOp>(&op)) {
        trials[cl->request_id].pending = false;
        push(searcher.TrialClosed(cl->request_id));
      }
    }
    return absl::OkStatus();
  };
  push(searcher.InitialOperations());
  if (absl::Status st = drain(); !st.ok()) return st;
  while (!searcher.shutdown() && run.total < options.budget) {
    int running = 0;
    for (auto& [id, t] : trials) running += t.running ? 1 : 0;
    std::vector<std::pair<int64_t, RequestId>> waiting;
    for (auto& [id, t] : trials) {
      if (t.pending && !t.running) waiting.emplace_back(t.order, id);
    }
    std::sort(waiting.begin(), waiting.end());
    for (size_t i = 0; i < waiting.size() && running < options.slots; ++i, ++running) {
      trials[waiting[i].second].running = true;
    }
    std::vector<std::pair<TrialState*, int64_t>> states;
    std::vector<RequestId> ids;
    for (auto& [id, t] : trials) {
      if (!t.running) continue;
      states.emplace_back(&t.s, t.target);
      ids.push_back(id);
    }
    if (Advance(task, states, run.total, options) == 0) {
      // The budget is spent (less than a batch per running trial left), or
      // nothing runs although the search goes on: a stalled search is an
      // error, never a silent miss.
      if (states.empty() || run.total + static_cast<int64_t>(states.size()) <= options.budget) {
        return absl::InternalError(absl::StrCat("the det-cpp search stalled at ", run.total, " batches (",
                                                states.size(), " trials running, searcher not done)"));
      }
      break;
    }
    for (RequestId id : ids) {
      DetTrial& t = trials[id];
      if (!AtValidation(t.s.trained, t.target, options.period)) continue;
      absl::StatusOr<double> v = task.Validate(t.s);
      if (!v.ok()) return absl::InternalError(absl::StrCat("task ", task.name(), ": ", v.status().message()));
      run.events.push_back({run.total, *v});
      if (t.s.trained < t.target) continue;
      t.running = false;
      t.pending = false;
      t.checkpoint = t.s;
      push(searcher.ValidationCompleted(id, *v, t.s.trained));
      if (absl::Status st = drain(); !st.ok()) return st;
    }
  }
  return run;
}

namespace {

constexpr size_t kMaxReplyBytes = 1 << 20;
constexpr int kReplyTimeoutMs = 300 * 1000;

absl::Status MissingOptuna(const std::string& python, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("the Optuna side needs ", python, " with Optuna 3.1 (Debian's python3-optuna; CI installs it ",
                   "with deploy/install-deps.sh; pick another interpreter with --python): ", why));
}

// One bench/search_peers_optuna.py process: JSON lines, one request, one reply.
class OptunaServer {
 public:
  ~OptunaServer() {
    if (to_ >= 0) close(to_);
    if (from_ >= 0) close(from_);
    // A server that has not exited after its pipes closed (hung) is killed.
    if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
      for (int i = 0; i < 100 && waitpid(pid_, nullptr, WNOHANG) == 0; ++i) usleep(10000);
      if (waitpid(pid_, nullptr, WNOHANG) == 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
      }
    }
  }

  absl::Status Start(const OptunaOptions& o) {
    python_ = o.python;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<std::string> args = {o.python, o.script};
    std::vector<char*> argv = {args[0].data(), args[1].data(), nullptr};
    int rc = posix_spawn(&pid_, o.python.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
    if (rc != 0) {
      pid_ = -1;
      return MissingOptuna(python_, absl::StrCat("cannot start it: ", std::strerror(rc)));
    }
    return absl::OkStatus();
  }

  // Sends `request`, returns the reply; an {"error": ...} reply is an error.
  absl::StatusOr<nlohmann::json> Call(const nlohmann::json& request) {
    std::string line = request.dump() + "\n";
    for (size_t done = 0; done < line.size();) {
      ssize_t n = write(to_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Exited("it stopped reading");
      done += static_cast<size_t>(n);
    }
    absl::StatusOr<std::string> reply = ReadLine();
    if (!reply.ok()) return reply.status();
    nlohmann::json j = nlohmann::json::parse(*reply, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InternalError(absl::StrCat("search_peers_optuna.py: a reply that is not a JSON object: ",
                                              reply->substr(0, 200)));
    }
    if (j.contains("error")) {
      std::string e = j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
      if (e.find("python3-optuna") != std::string::npos) return MissingOptuna(python_, e);
      return absl::InternalError(absl::StrCat("search_peers_optuna.py: ", e));
    }
    return j;
  }

 private:
  absl::Status Exited(const std::string& what) {
    int status = 0;
    if (pid_ > 0) kill(pid_, SIGKILL);  // it stopped answering: it will not answer later
    if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
        return MissingOptuna(python_, "the interpreter could not be run (exit 127)");
      }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {  // its own error, printed on stderr
      return absl::InternalError(absl::StrCat("search_peers_optuna.py ", what, " with exit 1 (its stderr is above)"));
    }
    return MissingOptuna(python_, absl::StrCat("search_peers_optuna.py ", what, " without answering (",
                                               WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                                 : std::string("killed"),
                                               "; its stderr is above)"));
  }

  absl::StatusOr<std::string> ReadLine() {
    while (true) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      if (buffer_.size() > kMaxReplyBytes) {
        return absl::InternalError(absl::StrCat("search_peers_optuna.py: a reply longer than ", kMaxReplyBytes));
      }
      pollfd p{from_, POLLIN, 0};
      int r = poll(&p, 1, kReplyTimeoutMs);
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return absl::InternalError("search_peers_optuna.py: no reply within 300 s");
      char chunk[65536];
      ssize_t n = read(from_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Exited("exited");
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string python_;
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  std::string buffer_;
};

nlohmann::json SpaceJson(const SearchSpace& space) {
  nlohmann::json out = nlohmann::json::array();
  for (const Dimension& d : space) {
    out.push_back({{"name", d.name}, {"kind", KindName(d.kind)}, {"low", d.low}, {"high", d.high}});
  }
  return out;
}

struct OptunaTrial {
  int64_t number = 0;
  TrialState s;
};

// Asks for trials while a slot is free, the budget is not spent and
// max_trials allows.
absl::Status FillSlots(OptunaServer& server, const SearchTask& task, const OptunaOptions& o, uint32_t seed,
                       const SimOptions& options, SearchRun& run, std::vector<OptunaTrial>& running) {
  while (static_cast<int>(running.size()) < options.slots && run.total < options.budget &&
         (o.max_trials == 0 || run.trials < o.max_trials)) {
    absl::StatusOr<nlohmann::json> r = server.Call({{"op", "ask"}});
    if (!r.ok()) return r.status();
    if (!r->contains("trial") || !(*r)["trial"].is_number_integer() || !r->contains("params")) {
      return absl::InternalError(absl::StrCat("search_peers_optuna.py: a bad ask reply ", r->dump()));
    }
    OptunaTrial t;
    t.number = (*r)["trial"].get<int64_t>();
    absl::StatusOr<TrialState> s = task.Start((*r)["params"], OptunaTrialSeed(seed, t.number));
    if (!s.ok()) return absl::InternalError(absl::StrCat("task ", task.name(), ": ", s.status().message()));
    t.s = *s;
    running.push_back(t);
    ++run.trials;
  }
  return absl::OkStatus();
}

// Validates the trials of `running` that are at a validation, reports each
// (report + should_prune) and tells Optuna of those that end: pruned, or
// complete at kTaskMaxLength.
absl::Status ReportValidations(OptunaServer& server, const SearchTask& task, const SimOptions& options,
                               SearchRun& run, std::vector<OptunaTrial>& running) {
  std::vector<OptunaTrial> still;
  for (OptunaTrial& t : running) {
    if (!AtValidation(t.s.trained, kTaskMaxLength, options.period)) {
      still.push_back(t);
      continue;
    }
    absl::StatusOr<double> v = task.Validate(t.s);
    if (!v.ok()) return absl::InternalError(absl::StrCat("task ", task.name(), ": ", v.status().message()));
    run.events.push_back({run.total, *v});
    // As Optuna's own objective loop: report, prune if told, else return the
    // last value at the end.
    absl::StatusOr<nlohmann::json> r =
        server.Call({{"op", "report"}, {"trial", t.number}, {"step", t.s.trained}, {"value", *v}});
    if (!r.ok()) return r.status();
    if (!r->contains("prune") || !(*r)["prune"].is_boolean()) {
      return absl::InternalError(absl::StrCat("search_peers_optuna.py: a bad report reply ", r->dump()));
    }
    std::string state = (*r)["prune"].get<bool>() ? "pruned" : t.s.trained >= kTaskMaxLength ? "complete" : "";
    if (state.empty()) {
      still.push_back(t);
      continue;
    }
    r = server.Call({{"op", "tell"}, {"trial", t.number}, {"state", state}, {"value", *v}});
    if (!r.ok()) return r.status();
  }
  running = std::move(still);
  return absl::OkStatus();
}

}  // namespace

uint32_t OptunaTrialSeed(uint32_t search_seed, int64_t trial_number) {
  uint64_t z = (static_cast<uint64_t>(search_seed) << 32) + static_cast<uint64_t>(trial_number) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((z ^ (z >> 31)) & 0xffffffffu);
}

absl::StatusOr<SearchRun> RunOptunaSearch(const SearchTask& task, const OptunaOptions& o, uint32_t seed,
                                          const SimOptions& options) {
  OptunaServer server;
  if (absl::Status st = server.Start(o); !st.ok()) return st;
  nlohmann::json init = {{"op", "init"},
                         {"sampler", o.sampler},
                         {"pruner", o.pruner},
                         {"seed", seed},
                         {"direction", "maximize"},
                         {"space", SpaceJson(task.space())},
                         {"min_resource", options.period},
                         {"max_resource", kTaskMaxLength},
                         {"reduction_factor", 4}};
  if (absl::StatusOr<nlohmann::json> r = server.Call(init); !r.ok()) return r.status();
  SearchRun run;
  std::vector<OptunaTrial> running;
  while (true) {
    if (absl::Status st = FillSlots(server, task, o, seed, options, run, running); !st.ok()) return st;
    std::vector<std::pair<TrialState*, int64_t>> states;
    for (OptunaTrial& t : running) states.emplace_back(&t.s, kTaskMaxLength);
    if (Advance(task, states, run.total, options) == 0) break;  // the budget is spent, or nothing runs
    if (absl::Status st = ReportValidations(server, task, options, run, running); !st.ok()) return st;
  }
  if (absl::StatusOr<nlohmann::json> r = server.Call({{"op", "close"}}); !r.ok()) return r.status();
  return run;
}

}  // namespace bench
}  // namespace det
