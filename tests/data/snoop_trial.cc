// Linked into snoop_trial.so with the synthetic trial
// (tests/security_tenants_test.cc, issue 46 finding 1): when the library is
// loaded with SNOOP_VICTIM_PID set, it attacks another user's trial as a
// trial of the same agent would, and prints one line with what it got:
//
//   SNOOP uid=U environ_readable=N token_hits=N cmdline_token_hits=N
//         victim_environ=ERR victim_fd4=ERR kill0=ERR sigstop=ERR
//         victim_dir=ERR storage_root_list=ERR
//
// token_hits counts /proc/*/environ files holding DET_ALLOCATION_TOKEN= with
// a value (cmdline_token_hits: the same in /proc/*/cmdline); each ERR is
// "ok" when the attempt succeeded, else the errno's name (EPERM, EACCES).
// SNOOP_VICTIM_DIR names the victim's checkpoint directory to open,
// SNOOP_STORAGE_ROOT the checkpoint storage root to list.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* ErrName(int err) {
  switch (err) {
    case 0: return "ok";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case ESRCH: return "ESRCH";
    default: return "other";
  }
}

// The file's first 1 MiB; *err: 0 or errno.
std::string Slurp(const std::string& path, int* err) {
  *err = 0;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return "";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while (out.size() < (1 << 20) && (n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  if (n < 0) *err = errno;
  close(fd);
  return out;
}

// Whether `text` (NUL-separated entries) holds DET_ALLOCATION_TOKEN=<value>.
bool HoldsToken(const std::string& text) {
  const std::string key = "DET_ALLOCATION_TOKEN=";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    if (at + key.size() < text.size() && text[at + key.size()] != '\0') return true;
  }
  return false;
}

__attribute__((constructor)) void Snoop() {
  const char* victim = std::getenv("SNOOP_VICTIM_PID");
  if (victim == nullptr) return;
  const pid_t self = getpid();
  int environ_readable = 0, token_hits = 0, cmdline_hits = 0;
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      const std::string name = e->d_name;
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (std::atoi(name.c_str()) == self) continue;
      int err = 0;
      const std::string env = Slurp("/proc/" + name + "/environ", &err);
      if (err == 0) ++environ_readable;
      if (HoldsToken(env)) ++token_hits;
      if (HoldsToken(Slurp("/proc/" + name + "/cmdline", &err))) ++cmdline_hits;
    }
    closedir(proc);
  }
  const std::string pid = victim;
  int victim_environ = 0, victim_fd4 = 0;
  Slurp("/proc/" + pid + "/environ", &victim_environ);
  Slurp("/proc/" + pid + "/fd/4", &victim_fd4);
  const int kill0 = kill(std::atoi(victim), 0) == 0 ? 0 : errno;
  const int sigstop = kill(std::atoi(victim), SIGSTOP) == 0 ? 0 : errno;
  int victim_dir = 0, root_list = 0;
  if (const char* dir = std::getenv("SNOOP_VICTIM_DIR")) {
    DIR* d = opendir(dir);
    victim_dir = d != nullptr ? 0 : errno;
    if (d != nullptr) closedir(d);
    int err = 0;
    Slurp(std::string(dir) + "/metadata.json", &err);
    if (victim_dir != 0 && err == 0) victim_dir = 0;  // a file read counts too
  }
  if (const char* root = std::getenv("SNOOP_STORAGE_ROOT")) {
    DIR* d = opendir(root);
    root_list = d != nullptr ? 0 : errno;
    if (d != nullptr) closedir(d);
  }
  std::printf(
      "SNOOP uid=%u environ_readable=%d token_hits=%d cmdline_token_hits=%d victim_environ=%s victim_fd4=%s "
      "kill0=%s sigstop=%s victim_dir=%s storage_root_list=%s\n",
      static_cast<unsigned>(getuid()), environ_readable, token_hits, cmdline_hits, ErrName(victim_environ),
      ErrName(victim_fd4), ErrName(kill0), ErrName(sigstop), ErrName(victim_dir), ErrName(root_list));
  std::fflush(stdout);
}

}  // namespace
