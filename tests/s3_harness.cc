#include "tests/s3_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <random>
#include <regex>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/test_util.h"

namespace det::test {
namespace {

using det::testing::PollUntil;
using det::testing::ReadFile;

constexpr char kS3rverScript[] = DET_SOURCE_DIR "/tests/s3/node_modules/s3rver/bin/s3rver.js";
constexpr char kS3check[] = DET_SOURCE_DIR "/tests/s3/s3check.py";
constexpr char kDebianPython[] = "/usr/bin/python3";

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string RandomSecret() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 40; ++i) s.push_back(kChars[rd() % (sizeof(kChars) - 1)]);
  return s;
}

void WritePrivateFile(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  fchmod(fd, 0600);
  const bool ok = write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  close(fd);
  if (!ok) throw std::runtime_error("short write to " + path);
}

// Forks `argv` into its own process group (killed with the test process),
// stdout/stderr to the given files.
pid_t SpawnGroup(const std::vector<std::string>& argv, const std::string& out, const std::string& err) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  const int in = open("/dev/null", O_RDONLY);
  const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || o < 0 || e < 0) _exit(127);
  dup2(in, STDIN_FILENO);
  dup2(o, STDOUT_FILENO);
  dup2(e, STDERR_FILENO);
  execve(args[0], args.data(), environ);
  _exit(127);
}

}  // namespace

absl::StatusOr<std::unique_ptr<S3Server>> S3Server::Start(const std::string& dir, std::vector<std::string> buckets,
                                                          S3ServerOptions options) {
  if (access(kS3rverScript, R_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "s3rver is not installed (", kS3rverScript, " is missing): run tests/s3/setup.sh (deploy/test.sh does)"));
  }
  const std::string node = FindOnPath("node");
  if (node.empty()) {
    return absl::FailedPreconditionError("node is not on PATH: install nodejs (deploy/install-deps.sh does)");
  }
  std::unique_ptr<S3Server> s(new S3Server());
  s->dir_ = dir;
  s->secret_ = RandomSecret();
  s->options_ = options;
  // s3rver's continuation tokens use DES, which OpenSSL 3 keeps in its
  // legacy provider: without it every truncated listing is an HTTP 500.
  std::vector<std::string> argv = {node, "--openssl-legacy-provider", kS3rverScript, "-d", dir + "/s3rver-data", "-a", "127.0.0.1", "-p", "0"};
  for (const std::string& b : buckets) argv.insert(argv.end(), {"--configure-bucket", b});
  if (options.vhost_localhost) argv.insert(argv.end(), {"--service-endpoint", "localhost"});
  if (!options.tls_cert.empty()) argv.insert(argv.end(), {"--key", options.tls_key, "--cert", options.tls_cert});
  s->pid_ = SpawnGroup(argv, dir + "/s3rver.out", dir + "/s3rver.err");
  if (s->pid_ < 0) return absl::InternalError("fork for s3rver failed");
  static const std::regex kListening("listening on 127\\.0\\.0\\.1:([0-9]+)");
  bool exited = false;
  PollUntil(
      [&] {
        std::smatch m;
        const std::string out = ReadFile(dir + "/s3rver.out");
        if (std::regex_search(out, m, kListening)) s->port_ = std::atoi(m[1].str().c_str());
        int status = 0;
        if (s->port_ == 0 && waitpid(s->pid_, &status, WNOHANG) == s->pid_) exited = true;
        return s->port_ != 0 || exited;
      },
      std::chrono::seconds(60));
  if (exited) s->pid_ = -1;
  if (s->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("s3rver did not listen within 60 s", exited ? " (it exited)" : "",
                                               ":\n", s->Log()));
  }
  return s;
}

S3Server::~S3Server() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

std::string S3Server::endpoint_url() const {
  return absl::StrCat(tls() ? "https" : "http", "://127.0.0.1:", port_);
}

std::string S3Server::Log() const { return ReadFile(dir_ + "/s3rver.out") + ReadFile(dir_ + "/s3rver.err"); }

std::string WriteS3CredentialsFile(const std::string& dir, const S3Server& s, const std::string& profile,
                                   const std::string& workspaces, const std::string& endpoint_url) {
  std::string text = absl::StrCat("# written by tests/s3_harness.cc\n[", profile, "]\naws_access_key_id = ",
                                  S3Server::kAccessKeyId, "\naws_secret_access_key = ", s.secret(),
                                  "\nendpoint_url = ", endpoint_url.empty() ? s.endpoint_url() : endpoint_url,
                                  "\nregion = us-east-1\ndet_workspaces = ", workspaces, "\n");
  if (s.tls()) absl::StrAppend(&text, "ca_bundle = ", s.options().tls_cert, "\n");
  const std::string path = absl::StrCat(dir, "/s3-credentials-", profile);
  WritePrivateFile(path, text);
  return path;
}

absl::StatusOr<nlohmann::json> RunBoto3(const S3Server& s, const std::vector<std::string>& args) {
  if (access(kDebianPython, X_OK) != 0) {
    return absl::FailedPreconditionError("/usr/bin/python3 is missing: install Debian's python3-boto3");
  }
  const std::string secret_file = s.dir() + "/boto3-secret";
  WritePrivateFile(secret_file, s.secret());
  std::vector<std::string> argv = {kDebianPython, kS3check, "--endpoint", s.endpoint_url(), "--access-key",
                                   S3Server::kAccessKeyId, "--secret-key-file", secret_file};
  if (s.tls()) argv.insert(argv.end(), {"--ca-bundle", s.options().tls_cert});
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out, err;
  const int rc = det::testing::RunProcess(argv, &out, &err, std::chrono::minutes(2));
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (rc != 0 || j.is_discarded()) {
    return absl::InternalError(absl::StrCat("s3check.py ", absl::StrJoin(args, " "), " exited ", rc, ": ", out,
                                            err, rc != 0 && absl::StrContains(err, "No module named 'boto3'")
                                                     ? " (install Debian's python3-boto3)"
                                                     : ""));
  }
  return j;
}

// ---- S3FaultProxy ----

struct S3FaultProxy::Conn {
  int client = -1, upstream = -1;  // closed (and set to -1) under mu_
  std::thread thread;
};

namespace {

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Appends what `fd` has to `buf`; false at EOF or on an error.
bool RecvSome(int fd, std::string* buf) {
  char tmp[64 * 1024];
  ssize_t n;
  do {
    n = recv(fd, tmp, sizeof(tmp), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  buf->append(tmp, static_cast<size_t>(n));
  return true;
}

// Forwards `count` bytes from `from` to `to`, taking `buf`'s bytes first.
bool Forward(int from, int to, std::string* buf, int64_t count) {
  while (count > 0) {
    if (buf->empty() && !RecvSome(from, buf)) return false;
    const size_t n = std::min<size_t>(buf->size(), static_cast<size_t>(count));
    if (!SendAll(to, buf->data(), n)) return false;
    buf->erase(0, n);
    count -= static_cast<int64_t>(n);
  }
  return true;
}

struct RequestHead {
  std::string line;  // "PUT /b/k?partNumber=2&uploadId=x HTTP/1.1"
  int64_t content_length = 0;
  bool chunked = false;
};

RequestHead ParseHead(absl::string_view head) {
  RequestHead r;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, "\r\n", absl::SkipEmpty())) {
    if (first) {
      r.line = std::string(line);
      first = false;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)));
    const absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (name == "content-length") absl::SimpleAtoi(value, &r.content_length);
    if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) r.chunked = true;
  }
  return r;
}

bool TargetHasPart(const std::string& request_line, int part) {
  const std::vector<std::string> fields = absl::StrSplit(request_line, ' ');
  if (fields.size() < 2) return false;
  const std::string needle = absl::StrCat("partNumber=", part);
  const std::string& target = fields[1];
  return absl::StrContains(target, needle + "&") || absl::EndsWith(target, needle);
}

std::string ErrorReply(int status) {
  const char* code = status == 503 ? "SlowDown"
                     : status == 500 ? "InternalError"
                     : status == 403 ? "AccessDenied"
                     : status == 404 ? "NoSuchKey"
                                     : "InjectedError";
  const std::string body = absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>", code,
                                        "</Code><Message>injected by S3FaultProxy</Message></Error>");
  return absl::StrCat("HTTP/1.1 ", status, " Injected\r\nContent-Type: application/xml\r\nContent-Length: ",
                      body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<S3FaultProxy>> S3FaultProxy::Start(int upstream_port) {
  std::unique_ptr<S3FaultProxy> p(new S3FaultProxy());
  p->upstream_port_ = upstream_port;
  p->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (p->listen_fd_ < 0 || bind(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(p->listen_fd_, 64) != 0 || getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(absl::StrCat("S3FaultProxy: cannot listen on 127.0.0.1: ", std::strerror(errno)));
  }
  p->port_ = ntohs(addr.sin_port);
  p->accept_thread_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

S3FaultProxy::~S3FaultProxy() {
  stopping_ = true;
  shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  if (accept_thread_.joinable()) accept_thread_.join();
  close(listen_fd_);
  std::vector<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& c : conns_) {
      if (c->client >= 0) shutdown(c->client, SHUT_RDWR);
      if (c->upstream >= 0) shutdown(c->upstream, SHUT_RDWR);
    }
    conns = conns_;
  }
  for (const auto& c : conns) c->thread.join();
}

std::string S3FaultProxy::endpoint_url() const { return absl::StrCat("http://127.0.0.1:", port_); }

void S3FaultProxy::CutUploadPart(int part_number, int times, int after_manifests) {
  std::lock_guard<std::mutex> lock(mu_);
  cut_part_ = part_number;
  cut_times_ = times;
  cut_after_manifests_ = after_manifests;
  cut_path_.clear();
}

std::vector<std::string> S3FaultProxy::manifest_puts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return manifest_puts_;
}

void S3FaultProxy::FailNextRequests(int n, int http_status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_n_ = n;
  fail_status_ = http_status;
}

void S3FaultProxy::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  cut_times_ = 0;
  fail_n_ = 0;
}

S3FaultProxy::Action S3FaultProxy::Decide(const std::string& request_line, int* status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_n_ > 0) {
    --fail_n_;
    *status = fail_status_;
    return Action::kFail;
  }
  const std::vector<std::string> fields = absl::StrSplit(request_line, ' ');
  const std::string path = fields.size() < 2 ? "" : fields[1].substr(0, fields[1].find('?'));
  if (fields[0] == "PUT" && absl::EndsWith(path, "/det-manifest.json")) {
    manifest_puts_.push_back(path);
    if (cut_after_manifests_ > 0) --cut_after_manifests_;
    return Action::kForward;
  }
  if (cut_times_ > 0 && cut_after_manifests_ == 0 && TargetHasPart(request_line, cut_part_) &&
      (cut_path_.empty() || cut_path_ == path)) {
    --cut_times_;
    cut_path_ = path;
    return Action::kCut;
  }
  return Action::kForward;
}

void S3FaultProxy::AcceptLoop() {
  while (!stopping_) {
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (stopping_ || errno == EINVAL || errno == EBADF) return;
      continue;
    }
    const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_port_));
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      if (upstream >= 0) close(upstream);
      close(client);
      continue;
    }
    auto conn = std::make_shared<Conn>();
    conn->client = client;
    conn->upstream = upstream;
    std::lock_guard<std::mutex> lock(mu_);
    conns_.push_back(conn);
    conn->thread = std::thread([this, conn] { Serve(conn); });
  }
}

// Client-to-server requests, one at a time; a second thread pumps the
// server's replies back.
void S3FaultProxy::Serve(const std::shared_ptr<Conn>& conn) {
  const int c = conn->client, u = conn->upstream;
  std::thread pump([c, u] {
    std::string buf;
    while (RecvSome(u, &buf) && SendAll(c, buf.data(), buf.size())) buf.clear();
    shutdown(c, SHUT_WR);
  });
  std::string buf;
  bool reset = false;
  while (!stopping_) {
    size_t end;
    bool open = true;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos && buf.size() < (1 << 20) && open) {
      open = RecvSome(c, &buf);
    }
    if (end == std::string::npos) break;  // EOF, or a head over 1 MiB
    const std::string head = buf.substr(0, end + 4);
    buf.erase(0, end + 4);
    const RequestHead req = ParseHead(head);
    ++requests_;
    int status = 0;
    const Action action = Decide(req.line, &status);
    if (action == Action::kFail) {
      ++failed_;
      if (status == 0) {
        reset = true;
        break;
      }
      const std::string reply = ErrorReply(status);
      SendAll(c, reply.data(), reply.size());
      shutdown(u, SHUT_RDWR);  // the pump ends and half-closes the client
      timeval tv{2, 0};  // drain what the client still sends (no RST)
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      while (RecvSome(c, &buf)) buf.clear();
      break;
    }
    if (!SendAll(u, head.data(), head.size())) break;
    if (action == Action::kCut) {
      ++cuts_;
      Forward(c, u, &buf, req.content_length / 2);
      reset = true;
      break;
    }
    if (req.chunked) {  // no request boundaries to find: pass the rest through
      while ((!buf.empty() || RecvSome(c, &buf)) && SendAll(u, buf.data(), buf.size())) buf.clear();
      break;
    }
    if (!Forward(c, u, &buf, req.content_length)) break;
  }
  shutdown(u, reset ? SHUT_RDWR : SHUT_WR);
  pump.join();
  Finish(conn, reset);
}

void S3FaultProxy::Finish(const std::shared_ptr<Conn>& conn, bool reset) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reset) {
    linger l{1, 0};  // close() sends RST
    setsockopt(conn->client, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  close(conn->client);
  close(conn->upstream);
  conn->client = conn->upstream = -1;
}

}  // namespace det::test
