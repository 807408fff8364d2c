#include "tests/test_util.h"

#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace det::testing {
namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "det-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

std::map<std::string, std::string> FilesUnder(const std::string& dir) {
  std::map<std::string, std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = ReadFile(e.path());
  }
  return out;
}

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::string& stdout_path,
                       const std::string& stderr_path)
    : stdout_path_(stdout_path), stderr_path_(stderr_path) {
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork for " + argv[0] + " failed");
  if (pid_ == 0) {
    // Only async-signal-safe calls until exec. The child dies with the test
    // process, so a crashed or killed test leaves no daemons behind.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int in = open("/dev/null", O_RDONLY);
    int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(127);
    dup2(in, STDIN_FILENO);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execve(args[0], args.data(), environ);
    _exit(127);
  }
}

Subprocess::~Subprocess() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

void Subprocess::Signal(int sig) {
  if (!exited_) kill(pid_, sig);
}

int Subprocess::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exited_) {
    pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
  return -1;
}

int RunProcess(const std::vector<std::string>& argv, std::string* out, std::string* err,
               std::chrono::milliseconds timeout) {
  TempDir tmp;
  int rc;
  {
    Subprocess p(argv, tmp / "stdout", tmp / "stderr");
    rc = p.Wait(timeout);
  }
  if (out) *out = ReadFile(tmp / "stdout");
  if (err) *err = ReadFile(tmp / "stderr");
  return rc;
}

std::string RestLogin(int http_port, const std::string& username, const std::string& password) {
  httplib::Client client("127.0.0.1", http_port);
  client.set_read_timeout(30, 0);
  nlohmann::json body = {{"username", username}, {"password", password}};
  auto res = client.Post("/api/v1/auth/login", body.dump(), "application/json");
  if (!res || res->status != 200) return "";
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("token") || !j["token"].is_string()) return "";
  return j["token"].get<std::string>();
}

void IsolateCliAuth(const std::string& dir) { setenv("DET_AUTH_FILE", (dir + "/det-auth.json").c_str(), 1); }

bool PollUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

namespace {

// The "KEY:   N kB" line of /proc/PID/status, in MiB; -1 when missing.
int64_t StatusMiB(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':') {
      return std::stoll(line.substr(key.size() + 1)) / 1024;
    }
  }
  return -1;
}

}  // namespace

int64_t RssMiB(pid_t pid) { return StatusMiB(pid, "VmRSS"); }

int64_t PeakRssMiB(pid_t pid) { return StatusMiB(pid, "VmHWM"); }

bool ProcessAlive(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

std::vector<pid_t> PidsWithEnv(const std::string& entry) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string name = proc.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = ReadFile(proc.path() / "environ");  // empty for a zombie
    for (size_t pos = 0; pos < env.size();) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      if (env.compare(pos, end - pos, entry) == 0) {
        pids.push_back(static_cast<pid_t>(std::stol(name)));
        break;
      }
      pos = end + 1;
    }
  }
  return pids;
}

std::string SingleTrialConfig(const std::string& name, const std::string& checkpoint_dir, int slots_per_trial) {
  return "name: " + name + R"(
hyperparameters:
  global_batch_size: 16
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100
max_restarts: 3
resources:
  slots_per_trial: )" + std::to_string(slots_per_trial) + R"(
checkpoint_storage:
  type: shared_fs
  host_path: )" + checkpoint_dir + "\n";
}

std::string FakeTrialSo() {
  // An ELF header, a .dynstr and a .dynsym that exports the trial entry
  // symbol (so the master's export check passes), and three section
  // headers: null, .dynsym, .dynstr. Nothing loadable.
  const std::string names = std::string("\0det_trial_plugin_entry\0", 24);
  const size_t str_off = sizeof(Elf64_Ehdr);
  const size_t sym_off = (str_off + names.size() + 7) / 8 * 8;
  const size_t sh_off = sym_off + 2 * sizeof(Elf64_Sym);
  Elf64_Ehdr header{};
  std::memcpy(header.e_ident, ELFMAG, SELFMAG);
  header.e_ident[EI_CLASS] = ELFCLASS64;
  header.e_ident[EI_DATA] = ELFDATA2LSB;
  header.e_ident[EI_VERSION] = EV_CURRENT;
  header.e_type = ET_DYN;
#if defined(__aarch64__)
  header.e_machine = EM_AARCH64;
#else
  header.e_machine = EM_X86_64;
#endif
  header.e_version = EV_CURRENT;
  header.e_ehsize = sizeof(Elf64_Ehdr);
  header.e_shoff = sh_off;
  header.e_shentsize = sizeof(Elf64_Shdr);
  header.e_shnum = 3;
  Elf64_Sym syms[2]{};
  syms[1].st_name = 1;
  syms[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  syms[1].st_shndx = 1;
  Elf64_Shdr sections[3]{};
  sections[1].sh_type = SHT_DYNSYM;
  sections[1].sh_offset = sym_off;
  sections[1].sh_size = sizeof(syms);
  sections[1].sh_link = 2;
  sections[1].sh_entsize = sizeof(Elf64_Sym);
  sections[2].sh_type = SHT_STRTAB;
  sections[2].sh_offset = str_off;
  sections[2].sh_size = names.size();
  std::string out(reinterpret_cast<const char*>(&header), sizeof(header));
  out += names;
  out.resize(sym_off, '\0');
  out.append(reinterpret_cast<const char*>(syms), sizeof(syms));
  out.append(reinterpret_cast<const char*>(sections), sizeof(sections));
  return out;
}

std::string WriteSelfSignedCert(const std::string& dir) {
  if (access("/usr/bin/openssl", X_OK) != 0) return "no /usr/bin/openssl to make a certificate";
  std::string out, err;
  int rc = RunProcess({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/key.pem",
                       "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost", "-addext",
                       "subjectAltName=IP:127.0.0.1,DNS:localhost"},
                      &out, &err);
  return rc == 0 ? "" : "openssl req failed: " + err;
}

}  // namespace det::testing
