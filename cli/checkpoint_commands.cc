#include "cli/checkpoint_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/terminal_text.h"
#include "common/proto_json.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using Stub = Client::Stub;

absl::Status Bad(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("download: '", path.substr(0, 256), "': ", why));
}

}  // namespace

CheckpointDirWriter::~CheckpointDirWriter() {
  if (fd_ >= 0) close(fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
}

absl::Status CheckpointDirWriter::Open(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return Bad(path, "not a relative path");
  std::vector<std::string> parts = absl::StrSplit(path, '/');
  for (const std::string& p : parts) {
    if (p.empty() || p == "." || p == ".." || p.size() > 255 || p.find('\0') != std::string::npos) {
      return Bad(path, "a path component is empty, '.', '..' or too long");
    }
  }
  if (!path_.empty() && path <= path_) return Bad(path, "files out of path order (or repeated)");
  if (dir_fd_ < 0) {
    mkdir(dir_.c_str(), 0755);  // DIR itself is the user's choice
    dir_fd_ = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("cannot open ", dir_, ": ", std::strerror(errno)));
  }
  int fd = dir_fd_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    mkdirat(fd, parts[i].c_str(), 0755);
    int next = openat(fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    if (fd != dir_fd_) close(fd);
    if (next < 0) return Bad(path, absl::StrCat("cannot open its directory (no symlink followed): ", std::strerror(err)));
    fd = next;
  }
  fd_ = openat(fd, parts.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int err = errno;
  if (fd != dir_fd_) close(fd);
  if (fd_ < 0) return Bad(path, absl::StrCat("cannot create (no symlink followed): ", std::strerror(err)));
  struct stat st;
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return Bad(path, "not a regular file");
  path_ = path;
  return absl::OkStatus();
}

absl::Status CheckpointDirWriter::Add(const v1::DownloadCheckpointResponse& chunk) {
  if (fd_ < 0 || chunk.path() != path_) {
    if (fd_ >= 0) return Bad(path_, absl::StrCat("ended after ", written_, " of ", size_, " bytes"));
    if (chunk.offset() != 0) return Bad(chunk.path(), "its first chunk is not at offset 0");
    if (chunk.file_size() < 0 || chunk.file_size() > max_total_bytes_ - total_) {
      return Bad(chunk.path(), "too large");
    }
    if (absl::Status st = Open(chunk.path()); !st.ok()) return st;
    size_ = chunk.file_size();
    written_ = 0;
    ++files_;
    total_ += size_;
  }
  if (chunk.offset() != written_ || chunk.file_size() != size_ ||
      static_cast<int64_t>(chunk.data().size()) > size_ - written_) {
    return Bad(path_, "chunks out of order or past the file's size");
  }
  const char* p = chunk.data().data();
  size_t left = chunk.data().size();
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
    p += n;
    left -= static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(chunk.data().size());
  if (written_ == size_) {
    if (close(fd_) != 0) return absl::InternalError(absl::StrCat("writing ", path_, ": ", std::strerror(errno)));
    fd_ = -1;
  }
  return absl::OkStatus();
}

absl::Status CheckpointDirWriter::Finish() {
  if (fd_ >= 0) return Bad(path_, absl::StrCat("ended after ", written_, " of ", size_, " bytes"));
  return absl::OkStatus();
}

int CheckpointDownload(Client& client, const std::string& uuid, const std::string& dir, const CommandIo& io) {
  v1::DownloadCheckpointRequest req;
  req.set_checkpoint_uuid(uuid);
  grpc::ClientContext ctx;
  client.PrepareContext(&ctx, /*streaming=*/true);
  auto reader = client.stub().DownloadCheckpoint(&ctx, req);
  CheckpointDirWriter writer(dir);
  v1::DownloadCheckpointResponse chunk;
  absl::Status st;
  while (st.ok() && reader->Read(&chunk)) st = writer.Add(chunk);
  if (!st.ok()) {
    ctx.TryCancel();
    reader->Finish();
    io.err << "det-cli: error: " << TerminalText(std::string(st.message()), kKeepLayout) << '\n';
    return 1;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return ReportError(client, status, io.err);
  if (st = writer.Finish(); !st.ok()) {
    io.err << "det-cli: error: " << TerminalText(std::string(st.message()), kKeepLayout) << '\n';
    return 1;
  }
  io.out << "Downloaded checkpoint " << uuid << " (" << writer.files() << " files, " << writer.total_bytes()
         << " bytes) to " << dir << '\n';
  return 0;
}

int CheckpointDelete(Client& client, const std::vector<std::string>& uuids, bool yes, const CommandIo& io) {
  if (!yes) {
    std::cerr << "Delete " << uuids.size() << " checkpoint(s) and their files? [y/N] ";
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      io.out << "Nothing deleted\n";
      return 1;
    }
  }
  v1::DeleteCheckpointsRequest req;
  for (const auto& u : uuids) req.add_checkpoint_uuids(u);
  v1::DeleteCheckpointsResponse resp;
  grpc::Status status = client.Call(&Stub::DeleteCheckpoints, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  io.out << "Deleted " << uuids.size() << " checkpoint(s)\n";
  return 0;
}

int CheckpointSetMetadata(Client& client, const std::string& uuid, const std::vector<std::string>& set,
                          const std::vector<std::string>& remove, const CommandIo& io) {
  v1::PatchCheckpointRequest req;
  req.set_checkpoint_uuid(uuid);
  nlohmann::json fields = nlohmann::json::object();
  for (const std::string& kv : set) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      io.err << "det-cli: error: '" << kv << "' is not key=value\n";
      return 2;
    }
    nlohmann::json value = nlohmann::json::parse(kv.substr(eq + 1), nullptr, false);
    fields[kv.substr(0, eq)] = value.is_discarded() ? nlohmann::json(kv.substr(eq + 1)) : value;
  }
  auto st = JsonToStruct(fields);
  if (!st.ok()) {
    io.err << "det-cli: error: " << st.status().message() << '\n';
    return 2;
  }
  *req.mutable_metadata() = *st;
  for (const auto& k : remove) req.add_remove_keys(k);
  v1::PatchCheckpointResponse resp;
  grpc::Status status = client.Call(&Stub::PatchCheckpoint, req, &resp);
  if (!status.ok()) return ReportError(client, status, io.err);
  if (io.json) {
    PrintJson(resp, io.out);
    return 0;
  }
  io.out << "Checkpoint " << uuid << " metadata: " << TerminalText(StructToJson(resp.checkpoint().metadata()).dump()) << '\n';
  return 0;
}

void AddCheckpointFileCommands(CLI::App* checkpoint, CheckpointFileArgs& args,
                               std::function<void(std::function<int(Client&, const CommandIo&)>)> set_run) {
  auto* download = checkpoint->add_subcommand("download", "Download a checkpoint's files into a directory");
  download->add_option("UUID", args.uuid, "Checkpoint uuid")->required();
  download->add_option("-o,--output", args.output_dir, "Directory to write into (created)")->required();
  download->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) { return CheckpointDownload(c, args.uuid, args.output_dir, io); });
  });
  auto* del = checkpoint->add_subcommand("delete", "Delete checkpoints and their files");
  del->add_option("UUIDS", args.uuids, "Checkpoint uuids")->required();
  del->add_flag("--yes,-y", args.yes, "Do not ask for confirmation");
  del->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) { return CheckpointDelete(c, args.uuids, args.yes, io); });
  });
  auto* meta = checkpoint->add_subcommand("set-metadata", "Set or remove keys of a checkpoint's metadata");
  meta->add_option("UUID", args.uuid, "Checkpoint uuid")->required();
  meta->add_option("PAIRS", args.set, "key=value (a JSON value, else a string)");
  meta->add_option("--remove", args.remove, "Key to remove (repeatable)");
  meta->add_flag("--json", args.json, "Print the response as protobuf JSON");
  meta->callback([&args, set_run] {
    set_run([&args](Client& c, const CommandIo& io) {
      CommandIo shown{io.out, io.err, args.json};
      return CheckpointSetMetadata(c, args.uuid, args.set, args.remove, shown);
    });
  });
}

}  // namespace det::cli
