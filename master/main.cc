// det-master: the master daemon. Serves the gRPC API (users, agents, trial
// processes) and the REST API over one core whose state lives in SQLite.
//
//   det-master [--data-dir DIR] [--grpc-port 8090] [--http-port 8080] [--ports-file FILE]
//              [--heartbeat-timeout-ms 15000] [--stop-timeout-s 60] [--dashboard-dir DIR]
//              [--cluster-secret-file FILE] [--token-ttl-hours 168]
//              [--tls-cert FILE --tls-key FILE]
//
// Every API call but Login and GetMaster needs a user token (users `admin`
// and `determined`, empty passwords, are created on first start); agents must
// present the cluster secret (file or $DET_CLUSTER_SECRET) when one is set.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/http/rest_server.h"
#include "master/service/grpc_services.h"

namespace {

bool ReadTextFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// The secret without surrounding whitespace (files usually end in '\n').
std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  det::master::MasterOptions options;
  std::string host = "127.0.0.1";
  int grpc_port = 8090;
  int http_port = 8080;
  std::string ports_file;
  std::string advertise;
  std::string log_level = "info";
  CLI::App app{"det-master: the det-cpp master daemon"};
  // Every flag can also come from a TOML file (keys = flag names without
  // "--"), e.g. deploy/config/master.toml; flags on the command line win.
  app.set_config("--config", "", "Read flags from this TOML file (see deploy/config/master.toml)");
  app.add_option("--data-dir", options.data_dir, "Directory for the SQLite database, artifacts and checkpoints")
      ->capture_default_str();
  app.add_option("--db", options.db_path, "SQLite database file (default DATA_DIR/det.db)");
  app.add_option("--checkpoint-root", options.checkpoint_root,
                 "Checkpoint directory for configs without checkpoint_storage (default DATA_DIR/checkpoints)");
  app.add_option("--host", host, "Address to listen on")->capture_default_str();
  app.add_option("--grpc-port", grpc_port, "gRPC port (0: any free port)")->capture_default_str();
  app.add_option("--http-port", http_port, "REST port (0: any free port)")->capture_default_str();
  app.add_option("--ports-file", ports_file, "Write the bound ports here as JSON once serving");
  app.add_option("--advertise-address", advertise, "gRPC address trial processes use (default HOST:GRPC_PORT)");
  app.add_option("--heartbeat-timeout-ms", options.heartbeat_timeout_ms, "Agent heartbeat timeout")
      ->capture_default_str();
  double stop_timeout_s = options.stop_timeout_ms / 1000.0;
  app.add_option("--stop-timeout-s", stop_timeout_s,
                 "A trial asked to stop (pause, cancel, kill) that has not exited after this long is killed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::string dashboard_dir;
  app.add_option("--dashboard-dir", dashboard_dir,
                 "Serve the web dashboard from this directory (e.g. master/http/dashboard) instead of the "
                 "copy built into det-master")
      ->check(CLI::ExistingDirectory);
  std::string cluster_secret_file;
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "File holding the secret agents must present (default $DET_CLUSTER_SECRET; none: agents are not "
                 "authenticated)")
      ->check(CLI::ExistingFile);
  double token_ttl_hours = 168;
  app.add_option("--token-ttl-hours", token_ttl_hours, "Lifetime of a login token")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  std::string tls_cert, tls_key;
  app.add_option("--tls-cert", tls_cert, "PEM certificate chain: serve gRPC over TLS (needs --tls-key)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (tls_cert.empty() != tls_key.empty()) {
    std::fprintf(stderr, "det-master: error: --tls-cert and --tls-key go together\n");
    return 2;
  }
  det::master::AuthOptions auth_options;
  auth_options.token_ttl_ms = static_cast<int64_t>(token_ttl_hours * 3600 * 1000);
  if (!cluster_secret_file.empty()) {
    std::string secret;
    if (!ReadTextFile(cluster_secret_file, &secret) || Trim(secret).empty()) {
      std::fprintf(stderr, "det-master: error: --cluster-secret-file %s: unreadable or empty\n",
                   cluster_secret_file.c_str());
      return 2;
    }
    auth_options.cluster_secret = Trim(secret);
  } else if (const char* env = std::getenv("DET_CLUSTER_SECRET"); env != nullptr) {
    auth_options.cluster_secret = Trim(env);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));
  options.stop_timeout_ms = static_cast<int64_t>(stop_timeout_s * 1000);

  // Signals are taken synchronously below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto core = det::master::MasterCore::Create(options);
  if (!core.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(core.status().message()).c_str());
    return 1;
  }
  auto auth = det::master::AuthCore::Create((*core)->store(), auth_options);
  if (!auth.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(auth.status().message()).c_str());
    return 1;
  }
  if (!(*auth)->cluster_secret_required()) {
    spdlog::warn("no cluster secret (--cluster-secret-file or DET_CLUSTER_SECRET): any process that reaches the "
                 "gRPC port can register as an agent");
  }
  det::master::ApiService api(core->get(), auth->get());
  det::master::AgentServiceImpl agents(core->get(), auth->get());
  det::master::TrialServiceImpl trials(core->get());
  grpc::ServerBuilder builder;
  int bound_grpc = 0;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!ReadTextFile(tls_key, &pair.private_key) || !ReadTextFile(tls_cert, &pair.cert_chain)) {
      std::fprintf(stderr, "det-master: error: cannot read --tls-cert/--tls-key\n");
      return 2;
    }
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(absl::StrCat(host, ":", grpc_port), credentials, &bound_grpc);
  const int64_t max_request_bytes = options.max_request_bytes();
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  builder.SetMaxSendMessageSize(64 << 20);
  builder.RegisterService(&api);
  builder.RegisterService(&agents);
  builder.RegisterService(&trials);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_grpc == 0) {
    std::fprintf(stderr, "det-master: error: cannot listen for gRPC on %s:%d\n", host.c_str(), grpc_port);
    return 1;
  }
  (*core)->set_trial_master_address(advertise.empty() ? absl::StrCat(host, ":", bound_grpc) : advertise);

  det::master::RestServer rest(core->get(), auth->get());
  rest.set_max_request_bytes(max_request_bytes);
  rest.set_dashboard_dir(dashboard_dir);
  auto bound_http = rest.Start(host, http_port);
  if (!bound_http.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(bound_http.status().message()).c_str());
    return 1;
  }
  spdlog::info("det-master serving gRPC on {}:{}, REST on http://{}:{}/api/v1/ and the dashboard on http://{}:{}/",
               host, bound_grpc, host, *bound_http, host, *bound_http);
  if (!ports_file.empty()) {
    std::string tmp = ports_file + ".tmp";
    std::ofstream(tmp) << "{\"grpc\": " << bound_grpc << ", \"http\": " << *bound_http << ", \"host\": \"" << host
                       << "\"}\n";
    std::filesystem::rename(tmp, ports_file);
  }

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("det-master: signal {}, shutting down", sig);
  rest.Stop();
  trials.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  core->reset();
  return 0;
}
