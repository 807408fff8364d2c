// Who may call each det.api.v1.Determined RPC: the one table the gRPC
// service and the REST server (through ApiHandlers) both enforce, so an RPC
// cannot be added without deciding who may call it.
//
//   kPublic           no token (Login, GetMaster);
//   kUser             any authenticated user (reads, creating experiments,
//                     uploading artifacts, their own session);
//   kSelfOrAdmin      a user changing their own account, or an admin (the
//                     AuthCore method decides which fields; see auth.h);
//   kExperimentOwner  the owner of the experiment the request names (through
//                     `id_field`: an experiment id, a trial id, checkpoint
//                     uuids or a job id), or an admin;
//   kAdmin            an admin only (users, agents, slots).
//
// A method of the service missing from the table is refused (PERMISSION_DENIED)
// for everyone: method_access_test.cc checks that every method is listed.
#ifndef DET_MASTER_SERVICE_METHOD_ACCESS_H_
#define DET_MASTER_SERVICE_METHOD_ACCESS_H_

#include "absl/strings/string_view.h"

namespace det::master {

enum class Access { kPublic, kUser, kSelfOrAdmin, kExperimentOwner, kAdmin, kUnlisted };

// What names the experiment of a kExperimentOwner request.
enum class OwnedBy { kNone, kExperimentId, kTrialId, kCheckpointUuids, kJobId };

struct MethodAccess {
  Access access = Access::kUnlisted;
  OwnedBy owned_by = OwnedBy::kNone;
  // The request field holding it ("experiment_id", "trial_id",
  // "checkpoint_uuids" (repeated) or "checkpoint_uuid" (one), "job_id");
  // null for the other kinds.
  const char* field = nullptr;
};

// The access rule of `method` (a method name of det.api.v1.Determined, e.g.
// "PauseExperiment"); kUnlisted for a name not in the table.
MethodAccess AccessOf(absl::string_view method);

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_METHOD_ACCESS_H_
