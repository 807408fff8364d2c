#include "common/secret_token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace det {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a plain file";
}

// The owner and permission bits of `st` for a daemon running as
// euid/egid: owner the daemon or root; no access for others; no group
// write; group read only for group root or the daemon's group.
absl::Status CheckOwnerAndMode(const struct stat& st, const std::string& name, const std::string& path, uid_t euid,
                               gid_t egid) {
  if (st.st_uid != euid && st.st_uid != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is owned by uid ", st.st_uid, ", neither this daemon's uid ",
                                                   euid, " nor root: it holds a secret; chown it to the daemon's user"));
  }
  const std::string mode = absl::StrFormat("%03o", st.st_mode & 0777);
  const std::string fix = absl::StrCat("chmod 600 ", path, " (0400, or 0440 with group root or the daemon's group, ",
                                       "also do)");
  if ((st.st_mode & 007) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": group or others may access it (mode ", mode, "); it holds a secret: ", fix));
  }
  if ((st.st_mode & 020) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": its group may write it (mode ", mode, "); it holds a secret: ", fix));
  }
  if ((st.st_mode & 070) != 0 && st.st_gid != 0 && st.st_gid != egid) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": group gid ", st.st_gid, " may access it (mode ", mode, "), neither root nor this daemon's gid ", egid,
        "; it holds a secret: ", fix, ", or chgrp it to the daemon's group"));
  }
  return absl::OkStatus();
}

// What a file larger than `max_bytes` is told.
std::string TooLarge(const std::string& name, size_t max_bytes, absl::string_view content) {
  return absl::StrCat(name, " is larger than ", max_bytes, " bytes: it should hold ",
                      content == "the token" ? "one token" : content);
}

// Checks the open file's kind, owner, mode and size.
absl::Status CheckOpenFile(int fd, const std::string& name, const std::string& path, uid_t euid, gid_t egid,
                           size_t max_bytes, absl::string_view content) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot stat it: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not a regular file (it is ", FileKind(st.st_mode), "): name a file holding ", content));
  }
  if (absl::Status owner = CheckOwnerAndMode(st, name, path, euid, egid); !owner.ok()) return owner;
  if (st.st_size > static_cast<off_t>(max_bytes)) return absl::InvalidArgumentError(TooLarge(name, max_bytes, content));
  return absl::OkStatus();
}

// At most max_bytes + 1 bytes of `fd` (one more than allowed, so a file that
// grew after fstat is still caught).
absl::StatusOr<std::string> ReadBounded(int fd, const std::string& name, size_t max_bytes,
                                        absl::string_view content) {
  std::string text(max_bytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read it: ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > max_bytes) return absl::InvalidArgumentError(TooLarge(name, max_bytes, content));
  text.resize(got);
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretTokenFile(const std::string& path, absl::string_view flag) {
  return ReadSecretTokenFileAs(path, flag, ::geteuid(), ::getegid());
}

absl::StatusOr<std::string> ReadSecretFileAs(const std::string& path, absl::string_view flag, uid_t euid, gid_t egid,
                                             size_t max_bytes, absl::string_view content) {
  const std::string name = absl::StrCat(flag, " ", path);
  // Links are followed; every check below is on the opened target.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": cannot read it: ", std::strerror(errno), "; name a file holding ", content));
  }
  absl::Status checked = CheckOpenFile(fd, name, path, euid, egid, max_bytes, content);
  absl::StatusOr<std::string> text =
      checked.ok() ? ReadBounded(fd, name, max_bytes, content) : absl::StatusOr<std::string>(checked);
  ::close(fd);
  return text;
}

absl::StatusOr<std::string> ReadSecretTokenFileAs(const std::string& path, absl::string_view flag, uid_t euid,
                                                  gid_t egid) {
  const std::string name = absl::StrCat(flag, " ", path);
  absl::StatusOr<std::string> text = ReadSecretFileAs(path, flag, euid, egid, kMaxSecretTokenBytes, "the token");
  if (!text.ok()) return text.status();
  const std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": empty; write the token in it (e.g. openssl rand -hex 32 > ", path, ")"));
  }
  for (char c : token) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte >= 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": the token holds a space, control or non-ASCII character; it must be one word of printable "
                "ASCII (e.g. openssl rand -hex 32)"));
    }
  }
  return token;
}

}  // namespace det
