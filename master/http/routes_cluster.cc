// REST routes of the master, agents, slots, pools and jobs (rest_routes.h).
#include "master/http/rest_routes.h"

namespace det::master {

std::vector<RestRoute> ClusterRoutes() {
  return {
      {"GET", "/api/v1/master", "GetMaster"},
      // The master's own recent log lines (admins; tail, levels, search_text,
      // after_id), merged into one answer; POST /api/v1/MasterLogs follows.
      {"GET", "/api/v1/master/logs", "MasterLogs", RestBody::kNone, "follow=false"},
      {"GET", "/api/v1/agents", "GetAgents"},
      {"GET", "/api/v1/agents/{agent_id}", "GetAgent"},
      {"POST", "/api/v1/agents/{agent_id}/enable", "EnableAgent"},
      {"POST", "/api/v1/agents/{agent_id}/disable", "DisableAgent", RestBody::kJson},
      {"GET", "/api/v1/agents/{agent_id}/slots", "GetSlots"},
      {"POST", "/api/v1/agents/{agent_id}/slots/{slot_id}/enable", "EnableSlot"},
      {"POST", "/api/v1/agents/{agent_id}/slots/{slot_id}/disable", "DisableSlot", RestBody::kJson},
      {"GET", "/api/v1/slots", "GetSlots"},
      {"GET", "/api/v1/resource-pools", "GetResourcePools"},
      {"GET", "/api/v1/job-queue", "GetJobQueue"},
      {"PATCH", "/api/v1/jobs/{job_id}", "UpdateJob", RestBody::kJson},
      // Workspaces and projects (Determined's paths; core/workspaces.cc).
      {"GET", "/api/v1/workspaces", "GetWorkspaces"},
      {"POST", "/api/v1/workspaces", "PostWorkspace", RestBody::kJson},
      {"GET", "/api/v1/workspaces/{id}", "GetWorkspace"},
      {"GET", "/api/v1/workspaces/{id}/projects", "GetWorkspaceProjects"},
      {"POST", "/api/v1/workspaces/{workspace_id}/projects", "PostProject", RestBody::kJson},
      {"GET", "/api/v1/projects/{id}", "GetProject"},
      {"POST", "/api/v1/workspaces/{id}/archive", "ArchiveWorkspace"},
      {"POST", "/api/v1/workspaces/{id}/unarchive", "UnarchiveWorkspace"},
      {"POST", "/api/v1/projects/{id}/archive", "ArchiveProject"},
      {"POST", "/api/v1/projects/{id}/unarchive", "UnarchiveProject"},
  };
}

}  // namespace det::master
