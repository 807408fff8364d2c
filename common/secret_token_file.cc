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

// Checks the open file's kind, owner, mode and size.
absl::Status CheckOpenFile(int fd, const std::string& name, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot stat it: ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not a regular file (it is ", FileKind(st.st_mode), "): name a file holding the token"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is owned by uid ", st.st_uid, ", not by this daemon's uid ",
                                                   ::geteuid(), ": it holds a secret; chown it to the daemon's user"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": group or others may access it (mode ",
                                                   absl::StrFormat("%03o", st.st_mode & 0777),
                                                   "); it holds a secret: chmod 600 ", path));
  }
  if (st.st_size > static_cast<off_t>(kMaxSecretTokenBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is larger than ", kMaxSecretTokenBytes, " bytes: it should hold one token"));
  }
  return absl::OkStatus();
}

// At most kMaxSecretTokenBytes + 1 bytes of `fd` (one more than allowed, so
// a file that grew after fstat is still caught).
absl::StatusOr<std::string> ReadBounded(int fd, const std::string& name) {
  std::string text(kMaxSecretTokenBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read it: ", std::strerror(errno)));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxSecretTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is larger than ", kMaxSecretTokenBytes, " bytes: it should hold one token"));
  }
  text.resize(got);
  return text;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretTokenFile(const std::string& path, absl::string_view flag) {
  const std::string name = absl::StrCat(flag, " ", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is a symbolic link: name the token file itself (links are not followed)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": cannot read it: ", std::strerror(errno), "; name a file holding the token"));
  }
  absl::Status checked = CheckOpenFile(fd, name, path);
  absl::StatusOr<std::string> text = checked.ok() ? ReadBounded(fd, name) : absl::StatusOr<std::string>(checked);
  ::close(fd);
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
