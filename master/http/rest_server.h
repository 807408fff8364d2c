// The REST/JSON API under /api/v1/, served from the same MasterCore as gRPC
// with protobuf's JSON mapping, so both always agree.
#ifndef DET_MASTER_HTTP_REST_SERVER_H_
#define DET_MASTER_HTTP_REST_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "master/core/master_core.h"

namespace httplib {
class Server;
}

namespace det::master {

class RestServer {
 public:
  explicit RestServer(MasterCore* core);
  ~RestServer();
  // Binds host:port (0: any free port) and serves in a background thread;
  // returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void Routes();
  MasterCore* core_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_SERVER_H_
