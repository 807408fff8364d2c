// det-cli master backup FILE [--force]: the master's database, as an online
// snapshot streamed by BackupDatabase (admins only; see
// docs/operations/backup.md for restoring it).
//
// FILE is written atomically: the stream goes to a temporary file beside it
// (mode 0600), is checked (chunks in order, the announced size, the
// SHA-256 of the last message), synced, and only then renamed to FILE. An
// existing FILE is never replaced without --force (even one created while
// the backup ran). On any error the temporary file is removed and FILE is
// left as it was.
#ifndef DET_CLI_MASTER_BACKUP_COMMAND_H_
#define DET_CLI_MASTER_BACKUP_COMMAND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "common/sha256.h"
#include "det/api/v1/master.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// Writes one BackupDatabase stream to a file. Not thread-safe.
class BackupFileWriter {
 public:
  // The largest chunk and snapshot accepted from the master.
  static constexpr int64_t kMaxChunkBytes = int64_t{1} << 20;
  static constexpr int64_t kMaxTotalBytes = int64_t{1} << 40;

  // Creates the temporary file beside `path`. AlreadyExists naming `path`
  // and --force when it exists and !force; InvalidArgument when its
  // directory cannot hold a new file (naming it and the OS error).
  static absl::StatusOr<std::unique_ptr<BackupFileWriter>> Create(const std::string& path, bool force);
  // Removes the temporary file unless Commit succeeded.
  ~BackupFileWriter();
  BackupFileWriter(const BackupFileWriter&) = delete;
  BackupFileWriter& operator=(const BackupFileWriter&) = delete;

  // Appends one message. DataLoss naming what is wrong for a chunk out of
  // order, over kMaxChunkBytes, past the announced size, a size that
  // changes or anything after the last message; ResourceExhausted when
  // FILE's file system has less room than the announced size.
  absl::Status Add(const ::det::api::v1::BackupDatabaseResponse& chunk);
  // Requires the last message: checks its size and SHA-256 (DataLoss
  // otherwise), syncs, and renames the temporary file to FILE
  // (AlreadyExists when FILE appeared meanwhile and !force).
  absl::Status Commit();

  const ::det::api::v1::BackupDatabaseResponse& last() const { return last_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  BackupFileWriter() = default;
  std::string path_;
  std::string temp_path_;
  bool force_ = false;
  int fd_ = -1;
  int64_t written_ = 0;
  int64_t size_ = -1;
  bool done_ = false;
  bool committed_ = false;
  Sha256 sha_;
  ::det::api::v1::BackupDatabaseResponse last_;  // the done message (data cleared)
};

// det-cli master backup's exit status for `st`: 0 when OK, 2 for
// AlreadyExists (FILE exists, or appeared while the backup ran, without
// --force), 1 otherwise.
int BackupExitCode(const absl::Status& st);

// One BackupDatabase call as WriteBackupStream drives it.
struct BackupStream {
  std::function<bool(::det::api::v1::BackupDatabaseResponse*)> read;  // false: the stream ended
  std::function<void()> cancel;  // ends the call early (a bad chunk)
  std::function<int()> finish;   // the call's status: 0, or the exit status after naming the error
};
// Writes `stream` into `path` with a BackupFileWriter (FILE is checked
// before the first read); prints its size, schema version, snapshot time
// and SHA-256. Returns the exit status: 0, 1 on an error (named on
// io.err), 2 when `path` exists without `force`, before the backup or
// when it appeared meanwhile.
int WriteBackupStream(const BackupStream& stream, const std::string& path, bool force, const CommandIo& io);

// Runs the backup into `path` over `client` (WriteBackupStream).
int MasterBackup(Client& client, const std::string& path, bool force, const CommandIo& io);

// Option values of `master backup`; must outlive the CLI::App.
struct MasterBackupArgs {
  std::string path;
  bool force = false;
};
// Registers `backup` under `master`; `set_run` receives the command to run
// once parsing succeeded.
void AddMasterBackupCommand(CLI::App* master, MasterBackupArgs& args,
                            std::function<void(std::function<int(Client&, const CommandIo&)>)> set_run);

}  // namespace det::cli

#endif  // DET_CLI_MASTER_BACKUP_COMMAND_H_
