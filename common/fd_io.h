// Whole reads and writes on a file descriptor, retried on EINTR. No
// allocation and no locks: safe between fork and exec (agent/reaper.cc)
// as well as in ordinary code (det-trial's prestart channel).
#ifndef DET_COMMON_FD_IO_H_
#define DET_COMMON_FD_IO_H_

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace det {

// Writes all n bytes of data; false when write fails or writes nothing first.
inline bool WriteFull(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes into data; false on EOF or an error first.
inline bool ReadFull(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace det

#endif  // DET_COMMON_FD_IO_H_
