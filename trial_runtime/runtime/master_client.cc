#include "trial_runtime/runtime/master_client.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/master_channel.h"

namespace det::runtime {
namespace {

// Reconnects within a second of a restarted master or a link coming back
// (gRPC's default reconnect backoff grows to two minutes); keepalive sees a
// dead link within seconds (master_channel.h).
std::shared_ptr<grpc::Channel> MasterChannel(const std::string& address) {
  grpc::ChannelArguments args;
  SetMasterChannelArgs(&args);
  return grpc::CreateCustomChannel(address, MasterChannelCredentials(), args);
}

ReportQueueOptions QueueOptions(std::chrono::milliseconds retry_timeout) {
  ReportQueueOptions o;
  o.retry_timeout = retry_timeout;
  return o;
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> MasterChannelCredentials() {
  const char* ca = std::getenv("DET_MASTER_CERT_FILE");
  return TlsOrInsecureCredentials(ca != nullptr ? ca : "");
}

std::chrono::milliseconds MasterRetryTimeout() {
  const char* v = std::getenv("DET_MASTER_RETRY_TIMEOUT_S");
  double s = v != nullptr ? std::atof(v) : 0;
  s = std::min(s, 7 * 24 * 3600.0);  // at most a week, so that the milliseconds fit
  return std::chrono::milliseconds(static_cast<int64_t>((s > 0 ? s : 600) * 1000));
}

MasterClient::MasterClient(const std::string& address, std::string allocation_id, std::string token)
    : stub_(::det::trial::v1::TrialService::NewStub(MasterChannel(address))),
      allocation_id_(std::move(allocation_id)),
      token_(std::move(token)),
      retry_timeout_(MasterRetryTimeout()),
      reports_(QueueOptions(retry_timeout_)) {}

absl::Status MasterClient::FlushReports(Clock::time_point deadline) {
  absl::Status s = reports_.Flush(deadline);
  if (s.code() != absl::StatusCode::kDeadlineExceeded) return s;
  return absl::UnavailableError(absl::StrCat(
      "the master was unreachable for ", std::chrono::duration_cast<std::chrono::seconds>(retry_timeout_).count(),
      " s (", s.message(), "); DET_MASTER_RETRY_TIMEOUT_S in det-agent's environment sets how long a trial retries"));
}

void MasterClient::Note(grpc::StatusCode code) {
  unreachable_ = code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (code == grpc::StatusCode::NOT_FOUND || code == grpc::StatusCode::PERMISSION_DENIED) revoked_ = true;
}

}  // namespace det::runtime
