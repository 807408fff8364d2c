// Conversion between absl::Status and grpc::Status, for the gRPC edges of
// the master, the agent and the trial runtime. The codes are the same
// numbers in both (OK = 0 ... UNAUTHENTICATED = 16); messages are kept.
// Built as det_common_grpc, apart from det_common, which needs no gRPC.
#ifndef DET_COMMON_GRPC_STATUS_H_
#define DET_COMMON_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace det {

// grpc::Status::OK for an OK status; otherwise the same code and message
// (payloads are dropped). Pure and thread-safe.
grpc::Status ToGrpcStatus(const absl::Status& status);

// OkStatus() for an OK status; otherwise the same code with the message,
// prefixed by "<what>: " when `what` is not empty (e.g. the call that
// failed: "FetchArtifact(<sha256>): not found"). Pure and thread-safe.
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what = "");

}  // namespace det

#endif  // DET_COMMON_GRPC_STATUS_H_
