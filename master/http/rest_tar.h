// GET /api/v1/checkpoints/{checkpoint_uuid}/download: a checkpoint as a
// POSIX tar (ustar; a pax "path" record for a path ustar cannot hold; sizes
// over 8 GiB in GNU base-256), streamed (chunked) from DownloadCheckpoint's
// chunks as they are read, never assembled in memory, so that
//   curl -H "Authorization: Bearer $T" .../download | tar x
// unpacks it. Errors before the first byte are the usual error JSON with
// their status (404 unknown uuid, 412 not COMPLETED, ...); an error after it
// (a file changed under the master: DATA_LOSS) cuts the stream without the
// end-of-archive blocks, so that tar and curl report a truncated download.
#ifndef DET_MASTER_HTTP_REST_TAR_H_
#define DET_MASTER_HTTP_REST_TAR_H_

#include <cstdint>
#include <memory>
#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <httplib.h>

#include "absl/status/statusor.h"
#include "det/api/v1/checkpoint.pb.h"
#include "master/service/api_handlers.h"

namespace det::master {

// Turns DownloadCheckpointResponse chunks into tar bytes. Not thread-safe.
class TarEncoder {
 public:
  // The tar bytes for `chunk` (a header first when it starts a file, the
  // padding when it ends one). InvalidArgument when chunks come out of order.
  absl::StatusOr<std::string> Add(const ::det::api::v1::DownloadCheckpointResponse& chunk);
  // The end-of-archive blocks. InvalidArgument when a file is unfinished.
  absl::StatusOr<std::string> Finish() const;

  // One ustar header block for a regular file (pax record first when `path`
  // does not fit). Exposed for tests.
  static std::string FileHeader(const std::string& path, int64_t size);

 private:
  std::string path_;
  int64_t size_ = 0;
  int64_t done_ = 0;
  bool open_ = false;
};

// A RestStreamer (rest_routes.h): answers `request` (a
// DownloadCheckpointRequest) of server-streaming `method` as a tar.
void ServeTar(const ApiHandlers& handlers, const google::protobuf::MethodDescriptor* method, const ApiCaller& caller,
              std::unique_ptr<google::protobuf::Message> request, httplib::Response& res);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_TAR_H_
