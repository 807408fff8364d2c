// det-master: the master daemon. Serves the gRPC API (users, agents, trial
// processes) and the REST API over one core whose state lives in SQLite.
//
//   det-master [--data-dir DIR] [--grpc-port 8090] [--http-port 8080] [--ports-file FILE]
//              [--heartbeat-timeout-ms 15000] [--stop-timeout-s 60]
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "master/core/master_core.h"
#include "master/http/rest_server.h"
#include "master/service/grpc_services.h"

int main(int argc, char** argv) {
  det::master::MasterOptions options;
  std::string host = "127.0.0.1";
  int grpc_port = 8090;
  int http_port = 8080;
  std::string ports_file;
  std::string advertise;
  std::string log_level = "info";
  CLI::App app{"det-master: the det-cpp master daemon"};
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
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
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
  det::master::ApiService api(core->get());
  det::master::AgentServiceImpl agents(core->get());
  det::master::TrialServiceImpl trials(core->get());
  grpc::ServerBuilder builder;
  int bound_grpc = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", grpc_port), grpc::InsecureServerCredentials(), &bound_grpc);
  builder.SetMaxReceiveMessageSize(300 << 20);
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

  det::master::RestServer rest(core->get());
  auto bound_http = rest.Start(host, http_port);
  if (!bound_http.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(bound_http.status().message()).c_str());
    return 1;
  }
  spdlog::info("det-master serving gRPC on {}:{} and REST on http://{}:{}/api/v1/", host, bound_grpc, host,
               *bound_http);
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
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  core->reset();
  return 0;
}
