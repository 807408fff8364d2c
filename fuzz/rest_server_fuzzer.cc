// libFuzzer target: the master's REST API (master/http/) over a real
// MasterCore and AuthCore on a temporary SQLite store, in-process: each input
// becomes one HTTP/1.1 request that RestServer::ServeRawForTesting runs
// through cpp-httplib's request parser, the authentication check and the
// route table (the declared routes, GET /api/v1/routes and the generic
// POST /api/v1/<RpcName> of every RPC: streaming ones answer NDJSON), as a
// connection would.
//
// Input layout (so that mutations mostly reach the handlers):
//   byte 0        the method: GET POST PATCH PUT DELETE HEAD OPTIONS (mod 7)
//   byte 1        flags: bit 0 adds "Content-Type: application/json",
//                 bit 1 "Authorization: Bearer <a valid token of determined>",
//                 bit 2 the same for admin (so that the authenticated routes
//                 are reached; tokens are renewed when a request revoked them)
//   then          the request target (path and query) up to the first '\n';
//                 bytes outside printable ASCII are percent-encoded
//   then          header lines "Name: value" up to an empty line
//   then          the body (Content-Length is added)
//
// Every request must be answered (never a crash, sanitizer report or hang),
// /api/ answers must be JSON (NDJSON: every line), and no answer may be a
// 500: a client's mistake is a 4xx, and a 500 means a handler threw or the
// core failed (501, an RPC not implemented yet, and 503 are allowed).
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/http/rest_server.h"
#include "nlohmann/json.hpp"

namespace {

struct Env {
  std::string dir;
  std::unique_ptr<det::master::MasterCore> core;
  std::unique_ptr<det::master::AuthCore> auth;
  std::unique_ptr<det::master::RestServer> rest;
  std::string tokens[2];  // determined, admin
};

Env* env = nullptr;

void TearDown() {
  if (env == nullptr) return;
  env->rest.reset();
  env->auth.reset();
  env->core.reset();
  std::error_code ec;
  std::filesystem::remove_all(env->dir, ec);
}

[[noreturn]] void Fail(const std::string& what, const std::string& request, const std::string& response) {
  std::fprintf(stderr, "rest_server_fuzzer: %s\n--- request ---\n%s\n--- response ---\n%s\n", what.c_str(),
               request.c_str(), response.c_str());
  std::abort();
}

// A valid token of `user` (logging in again when a fuzzed request logged it
// out or changed its password: then "" if the password is no longer empty).
std::string& Token(int i) {
  static constexpr const char* kUsers[] = {"determined", "admin"};
  std::string& token = env->tokens[i];
  if (token.empty() || !env->auth->Authenticate(token).ok()) {
    auto login = env->auth->Login(kUsers[i], "");
    token = login.ok() ? login->token() : "";
  }
  return token;
}

std::string Request(std::string_view in) {
  static constexpr const char* kMethods[] = {"GET", "POST", "PATCH", "PUT", "DELETE", "HEAD", "OPTIONS"};
  if (in.size() < 2) return "";
  std::string method = kMethods[static_cast<unsigned char>(in[0]) % 7];
  bool json = in[1] & 1;
  const char flags = in[1];
  in.remove_prefix(2);

  size_t eol = in.find('\n');
  std::string_view target = in.substr(0, eol);
  in = eol == std::string_view::npos ? std::string_view() : in.substr(eol + 1);
  std::string req = method + " ";
  if (target.empty() || target[0] != '/') req += '/';
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : target) {
    if (c <= 0x20 || c >= 0x7f) {
      req += '%';
      req += kHex[c >> 4];
      req += kHex[c & 15];
    } else {
      req += static_cast<char>(c);
    }
  }
  req += " HTTP/1.1\r\nHost: fuzz\r\n";
  if (json) req += "Content-Type: application/json\r\n";
  for (int i = 0; i < 2; ++i) {
    if (flags & (2 << i)) req += "Authorization: Bearer " + Token(i) + "\r\n";
  }
  while (!in.empty()) {
    eol = in.find('\n');
    std::string_view line = in.substr(0, eol);
    in = eol == std::string_view::npos ? std::string_view() : in.substr(eol + 1);
    if (line.empty()) break;
    // One header per line; CR, NUL and framing headers would change how
    // much of the input is the request, which is not what this target tests.
    if (line.find('\r') != std::string_view::npos || line.find('\0') != std::string_view::npos ||
        line.find(':') == std::string_view::npos ||
        absl::StartsWithIgnoreCase(absl::string_view(line.data(), line.size()), "content-length") ||
        absl::StartsWithIgnoreCase(absl::string_view(line.data(), line.size()), "transfer-encoding")) {
      continue;
    }
    req.append(line.data(), line.size());
    req += "\r\n";
  }
  req += "Content-Length: " + std::to_string(in.size()) + "\r\n\r\n";
  req.append(in.data(), in.size());
  return req;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  spdlog::set_level(spdlog::level::err);
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/det-rest-fuzz-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  env = new Env;
  env->dir = tmpl;
  det::master::MasterOptions options;
  options.data_dir = env->dir + "/master";
  options.background_thread = false;  // nothing runs between inputs
  auto core = det::master::MasterCore::Create(options);
  if (!core.ok()) {
    std::fprintf(stderr, "rest_server_fuzzer: MasterCore::Create: %s\n", core.status().ToString().c_str());
    std::abort();
  }
  env->core = std::move(*core);
  det::master::AuthOptions auth_options;
  auth_options.pbkdf2_iterations = 1;  // logins are fuzzed too; keep them cheap
  auto auth = det::master::AuthCore::Create(env->core->store(), auth_options);
  if (!auth.ok()) {
    std::fprintf(stderr, "rest_server_fuzzer: AuthCore::Create: %s\n", auth.status().ToString().c_str());
    std::abort();
  }
  env->auth = std::move(*auth);
  if (Token(0).empty() || Token(1).empty()) {
    std::fprintf(stderr, "rest_server_fuzzer: cannot log in as determined and admin\n");
    std::abort();
  }
  env->rest = std::make_unique<det::master::RestServer>(env->core.get(), env->auth.get());
  std::atexit(TearDown);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string request = Request(std::string_view(reinterpret_cast<const char*>(data), size));
  if (request.empty()) return 0;
  std::string response = env->rest->ServeRawForTesting(request);
  if (response.empty()) return 0;  // not parseable as a request: the connection is just closed
  if (!absl::StartsWith(response, "HTTP/1.1 ")) Fail("not an HTTP response", request, response);
  int status = 0;
  if (!absl::SimpleAtoi(response.substr(9, 3), &status)) Fail("no status code", request, response);
  if (status >= 500 && status != 501 && status != 503) Fail("server error", request, response);
  size_t body_at = response.find("\r\n\r\n");
  if (body_at == std::string::npos) Fail("no end of headers", request, response);
  std::string body = response.substr(body_at + 4);
  const std::string head = response.substr(0, body_at);
  if (absl::StrContains(head, "Content-Type: application/json") && !body.empty() && !nlohmann::json::accept(body)) {
    Fail("the JSON answer does not parse", request, response);
  }
  if (absl::StrContains(head, "Content-Type: application/x-ndjson")) {
    for (absl::string_view line : absl::StrSplit(body, '\n', absl::SkipEmpty())) {
      if (!nlohmann::json::accept(line.begin(), line.end())) Fail("an NDJSON line does not parse", request, response);
    }
  }
  return 0;
}
