// DownloadCheckpoint (api.proto): a COMPLETED checkpoint's files streamed as
// DownloadCheckpointResponse chunks (files in path order, each in offset
// order, at most 1 MiB per message), read through CheckpointFiles (no
// symlink followed, regular files of their recorded sizes only). The same
// chunks feed the gRPC stream, the generic REST NDJSON form and the REST tar
// (master/http/rest_tar.h).
#ifndef DET_MASTER_SERVICE_CHECKPOINT_DOWNLOAD_H_
#define DET_MASTER_SERVICE_CHECKPOINT_DOWNLOAD_H_

#include <functional>
#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "det/api/v1/checkpoint.pb.h"
#include "master/core/master_core.h"

namespace det::master {

// Sends every chunk of checkpoint req.checkpoint_uuid() through `write`
// until it returns false or `cancelled()` turns true (then OK: the client
// went away). Errors: OpenCheckpointFiles's before the first chunk,
// DataLoss after it. Blocks on disk reads; thread-compatible.
absl::Status StreamCheckpoint(MasterCore* core, const ::det::api::v1::DownloadCheckpointRequest& req,
                              const std::function<bool(const ::det::api::v1::DownloadCheckpointResponse&)>& write,
                              const std::function<bool()>& cancelled);

// The gRPC reactor of one DownloadCheckpoint call: one chunk in flight at a
// time, each read after the previous one was written. Deletes itself.
class DownloadCheckpointReactor final
    : public grpc::ServerWriteReactor<::det::api::v1::DownloadCheckpointResponse> {
 public:
  DownloadCheckpointReactor(MasterCore* core, const ::det::api::v1::DownloadCheckpointRequest& req);
  void OnWriteDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  void Next();
  std::unique_ptr<CheckpointFiles> files_;
  ::det::api::v1::DownloadCheckpointResponse chunk_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_CHECKPOINT_DOWNLOAD_H_
