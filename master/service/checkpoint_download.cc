#include "master/service/checkpoint_download.h"

#include "common/grpc_status.h"
#include "common/status_macros.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;

absl::Status StreamCheckpoint(MasterCore* core, const apiv1::DownloadCheckpointRequest& req,
                              const std::function<bool(const apiv1::DownloadCheckpointResponse&)>& write,
                              const std::function<bool()>& cancelled) {
  DET_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointFiles> files, core->OpenCheckpointFiles(req));
  apiv1::DownloadCheckpointResponse chunk;
  while (!cancelled()) {
    DET_ASSIGN_OR_RETURN(bool more, files->Next(&chunk));
    if (!more || !write(chunk)) return absl::OkStatus();
  }
  return absl::OkStatus();
}

DownloadCheckpointReactor::DownloadCheckpointReactor(MasterCore* core, const apiv1::DownloadCheckpointRequest& req) {
  auto files = core->OpenCheckpointFiles(req);
  if (!files.ok()) {
    Finish(ToGrpcStatus(files.status()));
    return;
  }
  files_ = *std::move(files);
  Next();
}

void DownloadCheckpointReactor::OnWriteDone(bool ok) {
  if (!ok) return Finish(grpc::Status::OK);  // the client went away
  Next();
}

void DownloadCheckpointReactor::Next() {
  auto more = files_->Next(&chunk_);
  if (!more.ok()) return Finish(ToGrpcStatus(more.status()));
  if (!*more) return Finish(grpc::Status::OK);
  StartWrite(&chunk_);
}

}  // namespace det::master
