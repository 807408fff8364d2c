#include "bench/scale_sim.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>

#include "common/det_version.h"

namespace det::bench {

namespace agentv1 = ::det::agent::v1;
namespace apiv1 = ::det::api::v1;
namespace trialv1 = ::det::trial::v1;
using Clock = std::chrono::steady_clock;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Samples::Add(double ms) {
  std::lock_guard<std::mutex> l(mu_);
  v_.push_back(ms);
}

size_t Samples::Count() const {
  std::lock_guard<std::mutex> l(mu_);
  return v_.size();
}

double Samples::Quantile(double q) const {
  std::lock_guard<std::mutex> l(mu_);
  if (v_.empty()) return 0;
  std::vector<double> s = v_;
  size_t k = std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())));
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
  return s[k];
}

// ---- SimAgents ----

SimAgents::SimAgents(const std::string& grpc_address, int agents, int slots, const std::string& prefix) {
  grpc::ChannelArguments args;
  args.SetInt("det-bench-agents", 1);
  channel_ = grpc::CreateCustomChannel(grpc_address, grpc::InsecureChannelCredentials(), args);
  auto stub = agentv1::AgentService::NewStub(channel_);
  for (int i = 0; i < agents; ++i) {
    auto a = std::make_unique<Agent>();
    a->id = prefix + "-" + std::to_string(i);
    agentv1::RegisterAgentRequest reg;
    reg.set_agent_id(a->id);
    reg.set_version(det::kDetVersion);
    reg.set_hostname("sim");
    for (int s = 0; s < slots; ++s) {
      auto* dev = reg.add_devices();
      dev->set_id(s);
      dev->set_type(apiv1::DEVICE_TYPE_CPU);
    }
    agentv1::RegisterAgentResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = stub->RegisterAgent(&ctx, reg, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "RegisterAgent %s: %s\n", a->id.c_str(), st.error_message().c_str());
      std::exit(1);
    }
    a->ctx.AddMetadata("authorization", "Bearer " + resp.session_token());
    a->stream = stub->Connect(&a->ctx);
    by_id_[a->id] = a.get();
    agents_.push_back(std::move(a));
  }
  for (auto& a : agents_) a->reader = std::thread([this, p = a.get()] { Read(p); });
}

SimAgents::~SimAgents() { Stop(); }

void SimAgents::Stop() {
  if (stop_.exchange(true)) return;
  cv_.notify_all();
  for (auto& a : agents_) a->ctx.TryCancel();
  for (auto& a : agents_) {
    if (a->reader.joinable()) a->reader.join();
  }
}

void SimAgents::Read(Agent* a) {
  agentv1::MasterMessage msg;
  while (a->stream->Read(&msg)) {
    if (msg.has_start_allocation()) {
      const auto& s = msg.start_allocation();
      agentv1::AgentMessage running;
      auto* ps = running.mutable_process_state();
      ps->set_allocation_id(s.allocation_id());
      ps->set_rank(0);
      ps->set_state(agentv1::PROCESS_STATE_RUNNING);
      ps->set_pid(1);
      {
        std::lock_guard<std::mutex> l(a->write_mu);
        a->stream->Write(running);
      }
      std::lock_guard<std::mutex> l(mu_);
      started_.push_back(StartedAllocation{a->id, s.allocation_id(), s.allocation_token(), s.trial_id()});
      ++starts_;
      cv_.notify_one();
    } else if (msg.has_kill_allocation()) {
      std::lock_guard<std::mutex> l(mu_);
      killed_[msg.kill_allocation().allocation_id()] = true;
    }
  }
}

bool SimAgents::NextStart(StartedAllocation* out, int timeout_ms) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return stop_.load() || !started_.empty(); });
  if (stop_.load() || started_.empty()) return false;
  *out = std::move(started_.front());
  started_.pop_front();
  return true;
}

void SimAgents::Terminated(const StartedAllocation& alloc, int exit_code) {
  auto it = by_id_.find(alloc.agent_id);
  if (it == by_id_.end()) return;
  agentv1::AgentMessage msg;
  auto* ps = msg.mutable_process_state();
  ps->set_allocation_id(alloc.allocation_id);
  ps->set_rank(0);
  ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
  ps->set_exit_code(exit_code);
  std::lock_guard<std::mutex> l(it->second->write_mu);
  it->second->stream->Write(msg);
}

bool SimAgents::KillRequested(const std::string& allocation_id) {
  std::lock_guard<std::mutex> l(mu_);
  return killed_.count(allocation_id) != 0;
}

// ---- SimTrials ----

struct SimTrials::Run {
  StartedAllocation alloc;
  trialv1::Operation op;
  bool have_op = false;
  int64_t completed_op = 0;
  int64_t batches = 0;
  Clock::time_point due = Clock::now();
  int stub = 0;
};

SimTrials::SimTrials(const std::string& grpc_address, SimAgents* agents, const TrialLoadOptions& options)
    : options_(options), agents_(agents) {
  for (int i = 0; i < options_.workers; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("det-bench-trial-worker", i);  // a connection per worker
    stubs_.push_back(trialv1::TrialService::NewStub(
        grpc::CreateCustomChannel(grpc_address, grpc::InsecureChannelCredentials(), args)));
  }
  for (int i = 0; i < options_.workers; ++i) threads_.emplace_back([this, i] { Work(i); });
}

SimTrials::~SimTrials() { Stop(); }

void SimTrials::Stop() {
  stop_ = true;
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::map<std::pair<int64_t, std::string>, int64_t> SimTrials::AckedByTrial() const {
  std::lock_guard<std::mutex> l(mu_);
  return acked_;
}

std::string SimTrials::first_error() const {
  std::lock_guard<std::mutex> l(mu_);
  return first_error_;
}

bool SimTrials::Call(const char* what, const std::string& token,
                     const std::function<grpc::Status(grpc::ClientContext*)>& f) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-det-allocation-token", token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status st = f(&ctx);
  if (st.ok()) return true;
  ++errors_;
  std::lock_guard<std::mutex> l(mu_);
  if (first_error_.empty()) first_error_ = std::string(what) + ": " + st.error_message();
  return false;
}

// One worker: its own runs, each advanced when due (round robin).
void SimTrials::Work(int index) {
  std::vector<std::unique_ptr<Run>> runs;
  int64_t epoch = schedule_epoch_.load();
  while (!stop_.load()) {
    if (epoch != schedule_epoch_.load()) {
      epoch = schedule_epoch_.load();
      for (auto& r : runs) r->due = std::max(r->due, Clock::now());
    }
    StartedAllocation a;
    // Take new allocations without waiting when there is work already.
    while (agents_->NextStart(&a, runs.empty() ? 50 : 0)) {
      auto r = std::make_unique<Run>();
      r->alloc = std::move(a);
      r->stub = index;
      runs.push_back(std::move(r));
      ++running_;
    }
    auto now = Clock::now();
    Clock::time_point next = now + std::chrono::milliseconds(20);
    for (size_t i = 0; i < runs.size() && !stop_.load();) {
      Run* r = runs[i].get();
      if (r->due <= now && !Step(r)) {
        runs.erase(runs.begin() + static_cast<std::ptrdiff_t>(i));
        --running_;
        continue;
      }
      next = std::min(next, r->due);
      ++i;
    }
    std::this_thread::sleep_until(std::max(next, Clock::now()));
  }
}

bool SimTrials::Step(Run* r) {
  auto& stub = *stubs_[static_cast<size_t>(r->stub)];
  const std::string& token = r->alloc.token;
  if (!r->have_op) {
    trialv1::GetNextOperationRequest req;
    req.set_allocation_id(r->alloc.allocation_id);
    req.set_completed_op_id(r->completed_op);
    req.set_total_batches(r->batches);
    trialv1::GetNextOperationResponse resp;
    if (!Call("GetNextOperation", token, [&](grpc::ClientContext* c) { return stub.GetNextOperation(c, req, &resp); })) {
      r->due = Clock::now() + std::chrono::seconds(1);
      return !agents_->KillRequested(r->alloc.allocation_id);
    }
    r->op = resp.operation();
    r->have_op = true;
  }
  const trialv1::Operation& op = r->op;
  auto done = [&] {
    r->completed_op = op.op_id();
    r->have_op = false;
  };
  switch (op.kind()) {
    case trialv1::OPERATION_KIND_TRAIN: {
      trialv1::ReportTrainingMetricsRequest req;
      req.set_allocation_id(r->alloc.allocation_id);
      // The lag counts from the actual send (the master's part); how late
      // that was against the schedule is counted apart.
      slip_.Add(std::max(0.0, std::chrono::duration<double, std::milli>(Clock::now() - r->due).count()));
      const int64_t sent = NowMs();
      const int64_t first = r->batches;
      for (int k = 0; k < options_.rows_per_request && r->batches < op.target_total_batches(); ++k) {
        auto* row = req.add_rows();
        row->set_total_batches(++r->batches);
        (*row->mutable_metrics())["loss"] = 1.0 / static_cast<double>(r->batches) + (r->batches % 17) * 0.001;
        (*row->mutable_metrics())["sent_ms"] = static_cast<double>(sent);
      }
      trialv1::ReportTrainingMetricsResponse resp;
      if (req.rows_size() > 0) {
        if (!Call("ReportTrainingMetrics", token,
                  [&](grpc::ClientContext* c) { return stub.ReportTrainingMetrics(c, req, &resp); })) {
          r->batches = first;  // resend these rows later
          r->due = Clock::now() + std::chrono::seconds(1);
          return !agents_->KillRequested(r->alloc.allocation_id);
        }
        acked_rows_ += req.rows_size();
        std::lock_guard<std::mutex> l(mu_);
        acked_[{r->alloc.trial_id, "training"}] += req.rows_size();
      }
      if (r->batches >= op.target_total_batches()) done();
      // A fixed schedule, not the call's latency added to each period: a
      // det-trial queues its reports and trains on (report_queue.h). A run
      // that fell behind catches up by at most 1 s of rows.
      const auto period = std::chrono::microseconds(
          static_cast<int64_t>(1e6 * req.rows_size() / std::max(0.001, options_.rows_per_second_per_trial)));
      r->due += period;
      const auto floor = Clock::now() - std::chrono::seconds(1);
      if (r->due < floor) {  // more than 1 s behind: the rest is counted as forgiven, not sent
        forgiven_rows_ += static_cast<int64_t>(std::chrono::duration<double>(floor - r->due).count() *
                                               options_.rows_per_second_per_trial);
        r->due = floor;
      }
      return true;
    }
    case trialv1::OPERATION_KIND_VALIDATE: {
      trialv1::ReportValidationMetricsRequest req;
      req.set_allocation_id(r->alloc.allocation_id);
      auto* row = req.add_rows();
      row->set_total_batches(r->batches);
      const double metric = 1.0 / static_cast<double>(r->batches + 1) + (r->alloc.trial_id % 100) * 0.01;
      (*row->mutable_metrics())["validation_loss"] = metric;
      trialv1::ReportValidationMetricsResponse resp;
      if (!Call("ReportValidationMetrics", token,
                [&](grpc::ClientContext* c) { return stub.ReportValidationMetrics(c, req, &resp); })) {
        return false;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        acked_[{r->alloc.trial_id, "validation"}] += 1;
      }
      ++validations_;
      trialv1::CompleteSearcherOperationRequest complete;
      complete.set_allocation_id(r->alloc.allocation_id);
      complete.set_op_id(op.op_id());
      complete.set_searcher_metric(metric);
      trialv1::CompleteSearcherOperationResponse cresp;
      if (!Call("CompleteSearcherOperation", token,
                [&](grpc::ClientContext* c) { return stub.CompleteSearcherOperation(c, complete, &cresp); })) {
        return false;
      }
      done();
      return true;
    }
    case trialv1::OPERATION_KIND_CHECKPOINT: {
      static std::atomic<uint64_t> counter{1};
      char uuid[40];
      const uint64_t n = counter++;
      std::snprintf(uuid, sizeof(uuid), "%08llx-0000-4000-8000-%012llx", static_cast<unsigned long long>(n >> 16),
                    static_cast<unsigned long long>(n * 2654435761ULL & 0xffffffffffffULL));
      trialv1::ReportCheckpointRequest req;
      req.set_allocation_id(r->alloc.allocation_id);
      req.set_uuid(uuid);
      req.set_total_batches(r->batches);
      (*req.mutable_resources())["state.pt"] = 1024;
      trialv1::ReportCheckpointResponse resp;
      if (!Call("ReportCheckpoint", token, [&](grpc::ClientContext* c) { return stub.ReportCheckpoint(c, req, &resp); })) {
        return false;
      }
      ++checkpoints_;
      done();
      return true;
    }
    case trialv1::OPERATION_KIND_WAIT:
      done();
      r->due = Clock::now() + std::chrono::milliseconds(200);
      return true;
    default:  // EXIT (or unknown): the process ends
      agents_->Terminated(r->alloc, 0);
      return false;
  }
}

// ---- Readers ----

Readers::Readers(const std::string& grpc_address, const std::string& token, std::vector<int64_t> experiment_ids,
                 std::vector<int64_t> trial_ids, int readers, int streams, int interval_ms)
    : lag_since_ms_(NowMs()), interval_ms_(interval_ms), token_(token), experiment_ids_(std::move(experiment_ids)), trial_ids_(std::move(trial_ids)) {
  grpc::ChannelArguments args;
  args.SetInt("det-bench-readers", 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  stub_ = apiv1::Determined::NewStub(grpc::CreateCustomChannel(grpc_address, grpc::InsecureChannelCredentials(), args));
  for (int i = 0; i < readers; ++i) threads_.emplace_back([this, i] { Read(i); });
  for (int s = 0; s < std::min(streams, 16); ++s) {
    std::vector<int64_t> mine;
    for (size_t i = static_cast<size_t>(s); i < trial_ids_.size() && mine.size() < 1000;
         i += static_cast<size_t>(streams)) {
      mine.push_back(trial_ids_[i]);
    }
    if (!mine.empty()) threads_.emplace_back([this, s, mine] { Follow(s, mine); });
  }
}

Readers::~Readers() { Stop(); }

void Readers::Stop() {
  if (stop_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> l(ctx_mu_);
    for (auto& c : stream_ctx_) c->TryCancel();
  }
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Readers::Read(int index) {
  std::mt19937_64 rng(static_cast<uint64_t>(index) + 1);
  auto timed = [&](Samples* s, const std::function<grpc::Status(grpc::ClientContext*)>& f) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto t0 = Clock::now();
    grpc::Status st = f(&ctx);
    s->Add(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!st.ok()) ++errors;
  };
  size_t next_trial = static_cast<size_t>(index);
  while (!stop_.load()) {
    if (experiment_ids_.empty()) break;
    const auto round_end = Clock::now() + std::chrono::milliseconds(interval_ms_);
    const int64_t exp = experiment_ids_[rng() % experiment_ids_.size()];
    apiv1::GetExperimentsRequest list;
    list.set_limit(100);
    apiv1::GetExperimentsResponse list_resp;
    timed(&experiments, [&](grpc::ClientContext* c) { return stub_->GetExperiments(c, list, &list_resp); });
    apiv1::GetExperimentRequest one;
    one.set_experiment_id(exp);
    apiv1::GetExperimentResponse one_resp;
    timed(&experiment, [&](grpc::ClientContext* c) { return stub_->GetExperiment(c, one, &one_resp); });
    apiv1::GetExperimentTrialsRequest table;
    table.set_experiment_id(exp);
    table.set_limit(100);
    table.set_offset(static_cast<int32_t>(rng() % 5) * 100);
    apiv1::GetExperimentTrialsResponse table_resp;
    timed(&trial_table, [&](grpc::ClientContext* c) { return stub_->GetExperimentTrials(c, table, &table_resp); });
    // Charts: every trial in turn, downsampled (the default).
    for (int k = 0; k < 4 && !trial_ids_.empty(); ++k) {
      apiv1::GetTrialMetricsRequest m;
      m.set_trial_id(trial_ids_[next_trial % trial_ids_.size()]);
      next_trial += 7;
      m.set_group("training");
      m.add_metric_names("loss");
      apiv1::GetTrialMetricsResponse m_resp;
      timed(&metrics, [&](grpc::ClientContext* c) { return stub_->GetTrialMetrics(c, m, &m_resp); });
      if (m_resp.metrics_size() > 1000) ++oversized_charts;
    }
    while (!stop_.load() && Clock::now() < round_end) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Readers::Follow(int index, std::vector<int64_t> trials) {
  (void)index;
  int64_t after_id = 0;
  while (!stop_.load()) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token_);
    grpc::ClientContext* c = ctx.get();
    {
      std::lock_guard<std::mutex> l(ctx_mu_);
      if (stop_.load()) return;
      stream_ctx_.push_back(std::move(ctx));
    }
    apiv1::StreamTrialMetricsRequest req;
    req.set_trial_id(trials[0]);
    for (size_t i = 1; i < trials.size(); ++i) req.add_trial_ids(trials[i]);
    req.set_group("training");
    req.set_follow(true);
    req.set_after_id(after_id);
    auto reader = stub_->StreamTrialMetrics(c, req);
    apiv1::StreamTrialMetricsResponse resp;
    while (reader->Read(&resp)) {
      const int64_t now = NowMs();
      for (const auto& m : resp.metrics()) {
        auto it = m.metrics().find("sent_ms");
        if (it != m.metrics().end() && it->second >= static_cast<double>(lag_since_ms_)) {
          lag.Add(static_cast<double>(now) - it->second);
        }
        ++streamed_rows;
      }
      after_id = resp.next_after_id();
    }
    grpc::Status st = reader->Finish();
    if (!st.ok() && !stop_.load()) ++errors;
    if (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace det::bench
