#include "common/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace det {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  if (what.empty()) return absl::Status(code, status.error_message());
  return absl::Status(code, absl::StrCat(what, ": ", status.error_message()));
}

}  // namespace det
