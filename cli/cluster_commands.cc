#include "cli/cluster_commands.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/table.h"
#include "det/api/v1/api.grpc.pb.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string SlotState(const v1::Slot& s) {
  if (s.enabled()) return "enabled";
  return s.draining() ? "disabled (draining)" : "disabled";
}

std::string AgentState(const v1::Agent& a) {
  if (a.enabled()) return "enabled";
  return a.draining() ? "disabled (draining)" : "disabled";
}

std::string DeviceLabel(const v1::Device& d) {
  std::string type = d.type() == v1::DEVICE_TYPE_CUDA ? "cuda" : "cpu";
  return d.brand().empty() ? type : absl::StrCat(type, " (", d.brand(), ")");
}

void PrintSlots(const v1::Agent& agent, std::ostream& out) {
  Table t({"SLOT", "DEVICE", "STATE", "ALLOCATION", "TRIAL"});
  for (const auto& s : agent.slots()) {
    t.AddRow({s.id(), DeviceLabel(s.device()), SlotState(s), s.allocation_id(),
              s.trial_id() == 0 ? "" : absl::StrCat(s.trial_id())});
  }
  t.Print(out);
}

}  // namespace

int ResourcePoolList(Client& client, const CommandIo& io) {
  v1::GetResourcePoolsResponse resp;
  grpc::Status status = client.Call(&Stub::GetResourcePools, v1::GetResourcePoolsRequest(), &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  Table t({"POOL", "DESCRIPTION", "AGENTS", "SLOTS (TOTAL / USED)", "QUEUED", "DEFAULT", "PRIORITY", "PREEMPTION"});
  for (const auto& p : resp.resource_pools()) {
    t.AddRow({p.name(), p.description(), absl::StrCat(p.num_agents()),
              absl::StrCat(p.slots_available(), " / ", p.slots_used()), absl::StrCat(p.num_pending_allocations()),
              p.is_default() ? "yes" : "", absl::StrCat(p.default_priority()), YesNo(p.preemption_enabled())});
  }
  t.Print(io.out);
  return 0;
}

int AgentDescribe(Client& client, const std::string& agent_id, const CommandIo& io) {
  v1::GetAgentRequest req;
  req.set_agent_id(agent_id);
  v1::GetAgentResponse resp;
  grpc::Status status = client.Call(&Stub::GetAgent, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  const v1::Agent& a = resp.agent();
  std::string addresses;
  for (const auto& addr : a.addresses()) absl::StrAppend(&addresses, addresses.empty() ? "" : ", ", addr);
  PrintKeyValues(io.out, {{"Agent", a.id()},
                          {"Hostname", a.hostname()},
                          {"Addresses", addresses},
                          {"Resource pool", a.resource_pool()},
                          {"State", AgentState(a)},
                          {"Connected", YesNo(a.connected())},
                          {"Version", a.version()},
                          {"Registered", FormatTime(a.registered_time())},
                          {"Last heartbeat", FormatTime(a.last_heartbeat_time())},
                          {"Slots", absl::StrCat(a.slots_size())}});
  io.out << '\n';
  PrintSlots(a, io.out);
  return 0;
}

int AgentEnable(Client& client, const std::string& agent_id, bool enable, bool drain, const CommandIo& io) {
  v1::Agent agent;
  grpc::Status status;
  if (enable) {
    v1::EnableAgentRequest req;
    req.set_agent_id(agent_id);
    v1::EnableAgentResponse resp;
    status = client.Call(&Stub::EnableAgent, req, &resp);
    agent = resp.agent();
  } else {
    v1::DisableAgentRequest req;
    req.set_agent_id(agent_id);
    req.set_drain(drain);
    v1::DisableAgentResponse resp;
    status = client.Call(&Stub::DisableAgent, req, &resp);
    agent = resp.agent();
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(agent, io.out);
    return 0;
  }
  if (enable) {
    io.out << "Enabled agent " << agent.id() << '\n';
  } else if (drain) {
    io.out << "Disabled agent " << agent.id() << " (draining: running work finishes, nothing new starts)\n";
  } else {
    io.out << "Disabled agent " << agent.id() << " (its running work checkpoints and moves)\n";
  }
  return 0;
}

int SlotEnable(Client& client, const std::string& agent_id, const std::string& slot_id, bool enable, bool drain,
               const CommandIo& io) {
  v1::Slot slot;
  grpc::Status status;
  if (enable) {
    v1::EnableSlotRequest req;
    req.set_agent_id(agent_id);
    req.set_slot_id(slot_id);
    v1::EnableSlotResponse resp;
    status = client.Call(&Stub::EnableSlot, req, &resp);
    slot = resp.slot();
  } else {
    v1::DisableSlotRequest req;
    req.set_agent_id(agent_id);
    req.set_slot_id(slot_id);
    req.set_drain(drain);
    v1::DisableSlotResponse resp;
    status = client.Call(&Stub::DisableSlot, req, &resp);
    slot = resp.slot();
  }
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(slot, io.out);
    return 0;
  }
  io.out << (enable ? "Enabled" : "Disabled") << " slot " << slot.id() << " (" << SlotState(slot) << ")\n";
  return 0;
}

void AddClusterControlCommands(CLI::App& app,
                               const std::function<void(std::function<int(Client&, const CommandIo&)>)>& set_run) {
  struct Args {
    std::string agent_id;
    std::string slot_id;
    bool drain = false;
    bool json = false;
  };
  // Referenced by the callbacks for the life of the process.
  static Args* const a = new Args();
  auto with_json = [](const CommandIo& io) { return CommandIo{io.out, io.err, a->json}; };

  auto* pools = app.add_subcommand("resource-pool", "Inspect resource pools")->require_subcommand(1);
  pools->alias("rp");
  auto* pool_list = pools->add_subcommand("list", "List resource pools: agents, slots, queued allocations");
  pool_list->add_flag("--json", a->json, "Print the response as protobuf JSON");
  pool_list->callback([set_run, with_json] {
    set_run([with_json](Client& c, const CommandIo& io) { return ResourcePoolList(c, with_json(io)); });
  });

  CLI::App* agent = app.get_subcommand("agent");
  auto* describe = agent->add_subcommand("describe", "Show an agent and its slots");
  describe->add_option("AGENT_ID", a->agent_id, "Agent id")->required();
  describe->add_flag("--json", a->json, "Print the response as protobuf JSON");
  describe->callback([set_run, with_json] {
    set_run([with_json](Client& c, const CommandIo& io) { return AgentDescribe(c, a->agent_id, with_json(io)); });
  });
  for (bool enable : {true, false}) {
    auto* sub = agent->add_subcommand(enable ? "enable" : "disable",
                                      enable ? "Enable an agent: trials may be placed on it again (admin)"
                                             : "Disable an agent: its trials checkpoint and move (admin)");
    sub->add_option("AGENT_ID", a->agent_id, "Agent id")->required();
    if (!enable) sub->add_flag("--drain", a->drain, "Let running trials finish; place nothing new");
    sub->add_flag("--json", a->json, "Print the agent as protobuf JSON");
    sub->callback([set_run, with_json, enable] {
      set_run([with_json, enable](Client& c, const CommandIo& io) {
        return AgentEnable(c, a->agent_id, enable, a->drain, with_json(io));
      });
    });
  }

  CLI::App* slot = app.get_subcommand("slot");
  for (bool enable : {true, false}) {
    auto* sub = slot->add_subcommand(enable ? "enable" : "disable",
                                     enable ? "Enable a slot (admin)"
                                            : "Disable a slot: its trial checkpoints and moves (admin)");
    sub->add_option("AGENT_ID", a->agent_id, "Agent id")->required();
    sub->add_option("SLOT_ID", a->slot_id, "Slot id (the device index, as `slot list` shows after the '/')")
        ->required();
    if (!enable) sub->add_flag("--drain", a->drain, "Let the running trial finish; place nothing new");
    sub->add_flag("--json", a->json, "Print the slot as protobuf JSON");
    sub->callback([set_run, with_json, enable] {
      set_run([with_json, enable](Client& c, const CommandIo& io) {
        return SlotEnable(c, a->agent_id, a->slot_id, enable, a->drain, with_json(io));
      });
    });
  }
}

}  // namespace det::cli
