// det-cli's commands on a checkpoint's files and metadata:
//   checkpoint download UUID -o DIR     (DownloadCheckpoint, gRPC stream)
//   checkpoint delete UUID... [--yes]   (DeleteCheckpoints)
//   checkpoint set-metadata UUID key=value... [--remove key]  (PatchCheckpoint)
// The master is not trusted with the client's file system: a download writes
// only below DIR (CheckpointDirWriter).
#ifndef DET_CLI_CHECKPOINT_COMMANDS_H_
#define DET_CLI_CHECKPOINT_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "det/api/v1/checkpoint.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// Writes a DownloadCheckpoint stream into directory `dir` (created if
// missing). Every path must be relative, without '..', '.' or empty
// components, and files must come in strictly increasing path order, each
// in offset order with one constant file_size; directories below `dir` are
// created and opened without following symlinks, files are opened with
// O_NOFOLLOW, so that nothing is ever written outside `dir` (an existing
// symlink in the way is an error). InvalidArgument naming the path
// otherwise. Not thread-safe.
class CheckpointDirWriter {
 public:
  explicit CheckpointDirWriter(std::string dir, int64_t max_total_bytes = int64_t{64} << 30)
      : dir_(std::move(dir)), max_total_bytes_(max_total_bytes) {}
  ~CheckpointDirWriter();
  absl::Status Add(const ::det::api::v1::DownloadCheckpointResponse& chunk);
  // Every file complete: InvalidArgument otherwise.
  absl::Status Finish();
  int files() const { return files_; }
  int64_t total_bytes() const { return total_; }

 private:
  absl::Status Open(const std::string& path);
  std::string dir_;
  int64_t max_total_bytes_;
  int dir_fd_ = -1;
  int fd_ = -1;
  std::string path_;
  int64_t size_ = 0;
  int64_t written_ = 0;
  int files_ = 0;
  int64_t total_ = 0;
};

int CheckpointDownload(Client& client, const std::string& uuid, const std::string& dir, const CommandIo& io);
int CheckpointDelete(Client& client, const std::vector<std::string>& uuids, bool yes, const CommandIo& io);
// `set`: "key=value" (value parsed as JSON when it is valid JSON, else a
// string); `remove`: keys.
int CheckpointSetMetadata(Client& client, const std::string& uuid, const std::vector<std::string>& set,
                          const std::vector<std::string>& remove, const CommandIo& io);

// Option values of these commands; must outlive the CLI::App.
struct CheckpointFileArgs {
  std::string uuid;
  std::vector<std::string> uuids;
  std::string output_dir;
  bool yes = false;
  std::vector<std::string> set;
  std::vector<std::string> remove;
  bool json = false;
};
// Registers download, delete and set-metadata under `checkpoint`;
// `set_run` receives the command to run once parsing succeeded.
void AddCheckpointFileCommands(CLI::App* checkpoint, CheckpointFileArgs& args,
                               std::function<void(std::function<int(Client&, const CommandIo&)>)> set_run);

}  // namespace det::cli

#endif  // DET_CLI_CHECKPOINT_COMMANDS_H_
