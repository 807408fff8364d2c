#include "trial_runtime/runtime/allocation_token.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

namespace det::runtime {

absl::StatusOr<std::string> ReadAllocationToken() {
  const char* fd_name = std::getenv("DET_ALLOCATION_TOKEN_FD");
  if (fd_name == nullptr || *fd_name == '\0') {
    const char* token = std::getenv("DET_ALLOCATION_TOKEN");
    return std::string(token != nullptr ? token : "");
  }
  int fd = -1;
  if (!absl::SimpleAtoi(fd_name, &fd) || fd < 3 || fd > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("DET_ALLOCATION_TOKEN_FD '", std::string(fd_name).substr(0, 32),
                                                   "' is not a file descriptor number (3..65535) that det-agent "
                                                   "passed; unset it to use DET_ALLOCATION_TOKEN"));
  }
  std::string token;
  char buf[512];
  int err = 0;
  while (token.size() <= kMaxAllocationTokenBytes) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    token.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DET_ALLOCATION_TOKEN_FD ", fd, ": cannot read the allocation token: ", std::strerror(err)));
  }
  if (token.size() > kMaxAllocationTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("DET_ALLOCATION_TOKEN_FD ", fd, ": more than ",
                                                   kMaxAllocationTokenBytes, " bytes; not an allocation token"));
  }
  std::string stripped(absl::StripAsciiWhitespace(token));
  if (stripped.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("DET_ALLOCATION_TOKEN_FD ", fd, ": no allocation token in it"));
  }
  return stripped;
}

bool MakeNonDumpable() { return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0; }

}  // namespace det::runtime
