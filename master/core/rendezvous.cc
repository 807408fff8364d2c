// MasterCore: how the ranks of a multi-rank allocation find each other. The
// master picks the chief's address and port when it places the allocation;
// each rank reports where it listens and waits until every rank has.
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {

void MasterCore::FillRendezvousLocked(AllocationRuntime& alloc) {
  // Ranks in placement order: the first placement's agent is node 0 and
  // holds the chief (rank 0), whose process group store listens on a port
  // of that agent's rendezvous range.
  apiv1::RendezvousInfo& rdv = alloc.rendezvous;
  rdv.Clear();
  alloc.rendezvous_reported.clear();
  int rank = 0;
  int node = 0;
  for (const auto& placement : alloc.placements) {
    auto ait = agents_.find(placement.agent_id);
    std::string address;
    if (ait != agents_.end()) {
      address = ait->second->addresses.empty() ? ait->second->row.hostname : ait->second->addresses.front();
    }
    int local_rank = 0;
    for (int slot : placement.slots) {
      auto* r = rdv.add_ranks();
      r->set_rank(rank++);
      r->set_local_rank(local_rank++);
      r->set_node_rank(node);
      r->set_agent_id(placement.agent_id);
      r->set_address(address);
      r->add_device_ids(slot);
    }
    ++node;
  }
  rdv.set_world_size(rank);
  rdv.set_num_nodes(node);
  if (rank <= 1) return;  // one rank: no process group
  AgentRuntime* chief = nullptr;
  auto cit = agents_.find(rdv.ranks(0).agent_id());
  if (cit != agents_.end()) chief = cit->second.get();
  rdv.set_chief_address(rdv.ranks(0).address());
  if (chief == nullptr) return;
  // A port of the chief agent's range that no other live allocation's chief
  // uses there, round robin so that a port a failed run left busy (or that
  // another program holds) is not picked again right away.
  std::set<int> taken;
  for (const auto& [id, other] : allocations_) {
    if (other.get() != &alloc && other->rendezvous.ranks_size() > 0 &&
        other->rendezvous.ranks(0).agent_id() == chief->row.id) {
      taken.insert(other->rendezvous.chief_port());
    }
  }
  const int n = chief->rendezvous_last - chief->rendezvous_first + 1;
  int port = chief->rendezvous_first + chief->next_rendezvous_port % n;
  for (int i = 0; i < n; ++i) {
    int candidate = chief->rendezvous_first + (chief->next_rendezvous_port + i) % n;
    if (taken.count(candidate) == 0) {
      port = candidate;
      break;
    }
  }
  chief->next_rendezvous_port = (port - chief->rendezvous_first + 1) % n;
  rdv.set_chief_port(port);
}

absl::StatusOr<trialv1::AllocationRendezvousResponse> MasterCore::AllocationRendezvous(
    const trialv1::AllocationRendezvousRequest& req, const std::string& token, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> l(mu_);
  const std::string id = req.allocation_id();
  {
    WriteScope w(this);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(id, token));
    apiv1::RendezvousInfo& rdv = alloc->rendezvous;
    if (req.rank() < 0 || req.rank() >= rdv.ranks_size()) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", req.rank(), " is outside [0, ", rdv.ranks_size(),
                                                     ") of allocation '", id, "'"));
    }
    if (req.port() < 0 || req.port() > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("port ", req.port(), " is not a TCP port"));
    }
    apiv1::RankInfo* r = rdv.mutable_ranks(req.rank());
    if (!req.address().empty()) r->set_address(req.address());
    r->set_port(req.port());
    if (req.rank() == 0 && !req.address().empty()) rdv.set_chief_address(req.address());
    alloc->rendezvous_reported.insert(req.rank());
    if (alloc->rendezvous_started_mono_ms == 0) alloc->rendezvous_started_mono_ms = MonoMs();
  }
  rendezvous_cv_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    auto it = allocations_.find(id);
    if (it == allocations_.end() || !TokenMatches(*it->second, token) || stop_) {
      return absl::FailedPreconditionError(absl::StrCat("allocation '", id, "' ended during the rendezvous"));
    }
    AllocationRuntime& alloc = *it->second;
    if (static_cast<int>(alloc.rendezvous_reported.size()) >= alloc.rendezvous.ranks_size()) {
      trialv1::AllocationRendezvousResponse resp;
      *resp.mutable_rendezvous() = alloc.rendezvous;
      return resp;
    }
    if (alloc.rendezvous_timed_out) {
      return absl::FailedPreconditionError(absl::StrCat("allocation '", id, "': the rendezvous timed out (",
                                                        alloc.failure, ")"));
    }
    if (rendezvous_cv_.wait_until(l, deadline) == std::cv_status::timeout &&
        std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "allocation '", id, "': ", alloc.rendezvous_reported.size(), " of ", alloc.rendezvous.ranks_size(),
          " ranks reached the rendezvous within ", wait.count(), " ms"));
    }
  }
}

}  // namespace det::master
