#include "cli/master_backup_command.h"

#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <CLI/CLI.hpp>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "cli/terminal_text.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;

std::string DirOf(const std::string& path) {
  std::vector<char> copy(path.begin(), path.end());
  copy.push_back('\0');
  return dirname(copy.data());
}

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError(absl::StrCat("backup: the master's stream ", why, "; nothing was written"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BackupFileWriter>> BackupFileWriter::Create(const std::string& path, bool force) {
  if (path.empty() || path.size() > 4096) {
    return absl::InvalidArgumentError("backup: FILE: give a path (at most 4096 bytes)");
  }
  struct stat st;
  if (!force && lstat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("backup: ", path, " exists; give another FILE, or --force to replace it"));
  }
  std::unique_ptr<BackupFileWriter> w(new BackupFileWriter());
  w->path_ = path;
  w->force_ = force;
  std::string tmpl = path + ".tmp-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  w->fd_ = mkostemp(name.data(), O_CLOEXEC);  // mode 0600
  if (w->fd_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup: cannot create a file in ", DirOf(path), " (FILE's directory): ", std::strerror(errno)));
  }
  w->temp_path_ = name.data();
  fchmod(w->fd_, 0600);
  return w;
}

BackupFileWriter::~BackupFileWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temp_path_.empty()) unlink(temp_path_.c_str());
}

absl::Status BackupFileWriter::Add(const v1::BackupDatabaseResponse& chunk) {
  if (done_) return Corrupt("went on after its last message");
  if (chunk.size_bytes() <= 0 || chunk.size_bytes() > kMaxTotalBytes) {
    return Corrupt(absl::StrCat("announced a size of ", chunk.size_bytes(), " bytes"));
  }
  if (size_ < 0) {
    size_ = chunk.size_bytes();
    struct statvfs vfs;
    if (fstatvfs(fd_, &vfs) == 0 && static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) < size_) {
      return absl::ResourceExhaustedError(absl::StrCat("backup: ", DirOf(path_), " has less room than the ", size_,
                                                       "-byte snapshot; free space there or give another FILE"));
    }
  }
  if (chunk.size_bytes() != size_) return Corrupt("changed its announced size");
  const int64_t n = static_cast<int64_t>(chunk.data().size());
  if (chunk.offset() != written_ || n > kMaxChunkBytes || n > size_ - written_) {
    return Corrupt(absl::StrCat("sent a chunk out of order or past the size (offset ", chunk.offset(), ", ", n,
                                " bytes, after ", written_, " of ", size_, ")"));
  }
  const char* p = chunk.data().data();
  size_t left = chunk.data().size();
  while (left > 0) {
    ssize_t w = write(fd_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::InternalError(absl::StrCat("backup: writing ", temp_path_, ": ", std::strerror(errno)));
    p += w;
    left -= static_cast<size_t>(w);
  }
  sha_.Update(chunk.data());
  written_ += n;
  if (chunk.done()) {
    done_ = true;
    last_ = chunk;
    last_.clear_data();
  }
  return absl::OkStatus();
}

absl::Status BackupFileWriter::Commit() {
  if (!done_) return Corrupt("ended before its last message");
  if (written_ != size_) return Corrupt(absl::StrCat("ended after ", written_, " of ", size_, " bytes"));
  const std::string sha = sha_.HexDigest();
  if (sha != last_.sha256()) {
    return Corrupt(absl::StrCat("does not match its SHA-256 (received ", sha, ", announced ",
                                TerminalText(last_.sha256().substr(0, 64)), ")"));
  }
  if (fsync(fd_) != 0 || close(fd_) != 0) {
    fd_ = -1;
    return absl::InternalError(absl::StrCat("backup: syncing ", temp_path_, ": ", std::strerror(errno)));
  }
  fd_ = -1;
  if (force_) {
    if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("backup: renaming to ", path_, ": ", std::strerror(errno)));
    }
  } else {
    // link() never replaces: FILE created meanwhile stays as it was.
    if (link(temp_path_.c_str(), path_.c_str()) != 0) {
      if (errno == EEXIST) {
        return absl::AlreadyExistsError(
            absl::StrCat("backup: ", path_, " appeared while the backup ran; give another FILE, or --force"));
      }
      return absl::InternalError(absl::StrCat("backup: creating ", path_, ": ", std::strerror(errno)));
    }
    unlink(temp_path_.c_str());
  }
  committed_ = true;
  int dir = open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

int BackupExitCode(const absl::Status& st) {
  if (st.ok()) return 0;
  return absl::IsAlreadyExists(st) ? 2 : 1;
}

int WriteBackupStream(const BackupStream& stream, const std::string& path, bool force, const CommandIo& io) {
  auto writer = BackupFileWriter::Create(path, force);
  auto fail = [&io](const absl::Status& st) {
    io.err << "det-cli: error: " << TerminalText(std::string(st.message())) << '\n';
    return BackupExitCode(st);
  };
  if (!writer.ok()) return fail(writer.status());
  v1::BackupDatabaseResponse chunk;
  absl::Status st;
  while (st.ok() && stream.read(&chunk)) st = (*writer)->Add(chunk);
  if (!st.ok()) {
    stream.cancel();
    return fail(st);
  }
  if (int rc = stream.finish(); rc != 0) return rc;
  // AlreadyExists (FILE appeared while the backup ran): 2, like the check
  // before it began.
  if (st = (*writer)->Commit(); !st.ok()) return fail(st);
  const v1::BackupDatabaseResponse& last = (*writer)->last();
  io.out << "Backed up the master's database to " << TerminalText(path) << ": " << last.size_bytes()
         << " bytes, schema version " << last.schema_version() << ", snapshot taken at "
         << google::protobuf::util::TimeUtil::ToString(last.snapshot_time()) << ", sha256 "
         << TerminalText(last.sha256()) << '\n';
  return 0;
}

int MasterBackup(Client& client, const std::string& path, bool force, const CommandIo& io) {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderInterface<v1::BackupDatabaseResponse>> reader;
  BackupStream stream;
  stream.read = [&](v1::BackupDatabaseResponse* chunk) {
    if (!reader) {
      client.PrepareContext(&ctx, /*streaming=*/true);
      reader = client.stub().BackupDatabase(&ctx, v1::BackupDatabaseRequest());
    }
    return reader->Read(chunk);
  };
  stream.cancel = [&] {
    ctx.TryCancel();
    if (reader) reader->Finish();
  };
  stream.finish = [&] {
    grpc::Status status = reader ? reader->Finish() : grpc::Status::OK;
    return status.ok() ? 0 : ReportError(client, status, io.err);
  };
  return WriteBackupStream(stream, path, force, io);
}

void AddMasterBackupCommand(CLI::App* master, MasterBackupArgs& args,
                            std::function<void(std::function<int(Client&, const CommandIo&)>)> set_run) {
  auto* backup = master->add_subcommand(
      "backup", "Write an online snapshot of the master's database to FILE (admins; see docs/operations/backup.md)");
  backup->add_option("FILE", args.path, "File to write (mode 0600; refused when it exists, unless --force)")
      ->required();
  backup->add_flag("--force", args.force, "Replace FILE when it exists");
  backup->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) { return MasterBackup(c, args.path, args.force, io); });
  });
}

}  // namespace det::cli
