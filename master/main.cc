// det-master: the master daemon. Serves the gRPC API (users, agents, trial
// processes) and the REST API over one core whose state lives in SQLite.
//
//   det-master [--data-dir DIR] [--grpc-port 8090] [--http-port 8080] [--ports-file FILE]
//              [--heartbeat-timeout-ms 15000] [--stop-timeout-s 60] [--rendezvous-timeout-s 600]
//              [--dashboard-dir DIR]
//              [--cluster-secret-file FILE] [--token-ttl-hours 168]
//              [--tls-cert FILE --tls-key FILE] [--max-message-mib 8] [--grpc-memory-mib 128]
//              [--shutdown-drain-ms 5000] [--init-empty-db]
//              [--initial-admin-password-file FILE] [--allow-empty-passwords]
//              [--resource-pools FILE.yaml]
//
// Every API call but Login and GetMaster needs a user token (users `admin`
// and `determined`, empty passwords, are created on first start); agents must
// present the cluster secret (--cluster-secret-file; never the environment)
// when one is set, and, once registered, their per-agent credential
// (--reset-agent ID forgets an agent id's credential). A master whose --host
// is not loopback refuses to start while `admin` or `determined` has an
// empty password, unless --allow-empty-passwords.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/master_channel.h"
#include "master/core/auth.h"
#include "master/core/listen_address.h"
#include "master/core/master_core.h"
#include "master/core/master_log_ring.h"
#include "master/core/master_metrics.h"
#include "master/http/metrics_access.h"
#include "master/http/rest_server.h"
#include "master/service/database_backup.h"
#include "master/service/grpc_services.h"
#include "master/service/metrics_interceptor.h"
#include "master/service/parse_error_interceptor.h"
#include "master/store/data_dir.h"

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

// Everything the command line (or --config TOML) sets.
struct Flags {
  det::master::MasterOptions options;
  det::master::RestListenerOptions rest;  // --rest-*
  std::string host = "127.0.0.1";
  int grpc_port = 8090;
  int http_port = 8080;
  std::string ports_file;
  std::string advertise;
  std::string log_level = "info";
  double stop_timeout_s = 60;
  double rendezvous_timeout_s = 600;
  double max_trial_log_mib = 64;
  double max_log_line_kib = 64;
  double max_trial_metric_mib = 256;
  double max_trial_checkpoint_mib = 256;
  double max_checkpoint_metadata_kib = 1024;
  std::string dashboard_dir;
  std::string cluster_secret_file;
  std::string metrics_token_file, metrics_listen;  // GET /metrics (master_metrics.h)
  double token_ttl_hours = 168;
  std::string tls_cert, tls_key;
  std::vector<std::string> reset_agents;
  std::string initial_admin_password_file;
  bool allow_empty_passwords = false;
  bool allow_insecure_data_dir = false;
  bool init_empty_db = false;
  int64_t shutdown_drain_ms = 5000;
  double max_message_mib = 8;
  double grpc_memory_mib = 128;
  double max_artifact_mib = 1024;
  std::string resource_pools_file;
  std::string resource_manager_file;
  std::string trial_uid_range;
};

// The metric and checkpoint bounds (master/store/metric_limits.h); a report
// over one is refused. 0: unbounded.
void AddMetricFlags(CLI::App& app, Flags& f) {
  det::master::MetricLimits& m = f.options.metric_limits;
  app.add_option("--max-metric-name-bytes", m.max_name_bytes,
                 "Longest metric name accepted; a report with a longer one is refused")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-metric-values-per-report", m.max_values_per_report,
                 "Most metric values in one reported row (one report); a larger report is refused")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-trial-metric-names", m.max_trial_names,
                 "Most distinct metric names per trial over all groups; a report adding more is refused")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  f.max_trial_metric_mib = m.max_trial_bytes / double(1 << 20);
  app.add_option("--max-trial-metric-mib", f.max_trial_metric_mib,
                 "Metric data stored per trial (1 to 1048576, or 0: unbounded); once reached, further metric "
                 "reports are refused")
      ->capture_default_str();
}

void AddCheckpointFlags(CLI::App& app, Flags& f) {
  det::master::CheckpointLimits& c = f.options.checkpoint_limits;
  app.add_option("--max-trial-checkpoints", c.max_trial_checkpoints,
                 "Most checkpoints a trial may report, deleted ones included (0: unbounded); further reports are "
                 "refused")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--max-checkpoint-resources", c.max_resources_per_report,
                 "Most files one checkpoint report may list (0: unbounded); a larger report is refused")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  f.max_checkpoint_metadata_kib = c.max_metadata_bytes / 1024.0;
  app.add_option("--max-checkpoint-metadata-kib", f.max_checkpoint_metadata_kib,
                 "Largest metadata of one checkpoint report (1 to 1048576, or 0: unbounded); a larger one is "
                 "refused")
      ->capture_default_str();
  f.max_trial_checkpoint_mib = c.max_trial_bytes / double(1 << 20);
  app.add_option("--max-trial-checkpoint-mib", f.max_trial_checkpoint_mib,
                 "Checkpoint rows (file lists, metadata) stored per trial (1 to 1048576, or 0: unbounded); once "
                 "reached, further checkpoint reports are refused")
      ->capture_default_str();
}

// --data-dir and what lies in it, and the log and trial.so bounds.
void AddStorageFlags(CLI::App& app, Flags& f) {
  app.add_option("--data-dir", f.options.data_dir,
                 "Directory for the SQLite database, artifacts and checkpoints (created 0700; refused when group or "
                 "others may access it or another uid owns it)")
      ->capture_default_str();
  app.add_flag(det::master::kAllowInsecureDataDirFlag, f.allow_insecure_data_dir,
               "Start even when group or others may access --data-dir or another uid owns it (not recommended: it "
               "holds password and token hashes)");
  app.add_option("--db", f.options.db_path, "SQLite database file (default DATA_DIR/det.db)");
  app.add_flag(det::master::kInitEmptyDbFlag, f.init_empty_db,
               "Create an empty database even though the data dir holds a cluster's state (its cluster-id, "
               "artifacts, checkpoints, a -wal file) and the database is missing: give it once, on purpose (on the "
               "command line only, never from --config)")
      ->configurable(false);
  app.add_option("--checkpoint-root", f.options.checkpoint_root,
                 "Checkpoint directory for configs without checkpoint_storage (default DATA_DIR/checkpoints)");
  app.add_option("--checkpoint-storage-root", f.options.checkpoint_storage_roots,
                 "A directory under which configs' checkpoint_storage.host_path may lie (repeatable; the checkpoint "
                 "root is always allowed); must not contain the data dir or the database");
  app.add_option("--s3-credentials-file", f.options.s3_credentials_file,
                 "AWS shared-credentials file of the S3 profiles that checkpoint_storage type s3 names (owned by "
                 "det-master's user or root, mode 0600; each profile's det_workspaces say which workspaces may use "
                 "it; docs/operations/checkpoint-storage.md). Secrets are never read from AWS_* variables");
  f.max_trial_log_mib = f.options.max_trial_log_bytes / double(1 << 20);
  app.add_option("--max-trial-log-mib", f.max_trial_log_mib,
                 "Log volume kept per trial; beyond it the oldest lines are dropped (a marker line says how many)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-artifact-mib", f.max_artifact_mib,
                 "Largest trial.so accepted (UploadArtifact streams it to disk in 1 MiB chunks)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  f.max_log_line_kib = f.options.max_log_line_bytes / 1024.0;
  app.add_option("--max-log-line-kib", f.max_log_line_kib, "Longest log line stored; longer lines are cut (marked)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

// Where and how the master serves, and how long it waits for trials.
void AddServerFlags(CLI::App& app, Flags& f) {
  app.add_option("--host", f.host, "Address to listen on")->capture_default_str();
  app.add_option("--grpc-port", f.grpc_port, "gRPC port (0: any free port)")->capture_default_str();
  app.add_option("--http-port", f.http_port, "REST port (0: any free port)")->capture_default_str();
  app.add_option("--ports-file", f.ports_file, "Write the bound ports here as JSON once serving");
  app.add_option("--advertise-address", f.advertise,
                 "gRPC address trial processes dial: HOST[:PORT], the bound gRPC port when PORT is omitted "
                 "(default HOST:GRPC_PORT; required when --host is 0.0.0.0 or ::)");
  app.add_option("--heartbeat-timeout-ms", f.options.heartbeat_timeout_ms, "Agent heartbeat timeout")
      ->capture_default_str();
  app.add_option("--shutdown-drain-ms", f.shutdown_drain_ms,
                 "On SIGTERM the health check answers 503 for this long before the ports close, so load "
                 "balancers and probes see it (a second SIGTERM ends it early); 0 to 600000")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  f.stop_timeout_s = f.options.stop_timeout_ms / 1000.0;
  app.add_option("--stop-timeout-s", f.stop_timeout_s,
                 "A trial asked to stop (pause, cancel, kill) that has not exited after this long is killed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  f.rendezvous_timeout_s = f.options.rendezvous_timeout_ms / 1000.0;
  app.add_option("--rendezvous-timeout-s", f.rendezvous_timeout_s,
                 "Once a rank of a multi-rank trial reaches the rendezvous, the others have this long; then the "
                 "allocation fails (a restart) and is killed")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--dashboard-dir", f.dashboard_dir,
                 "Serve the web dashboard from this directory (e.g. master/http/dashboard) instead of the "
                 "copy built into det-master")
      ->check(CLI::ExistingDirectory);
}

// Agents' secret, login tokens, TLS and the built-in users' passwords.
void AddAuthFlags(CLI::App& app, Flags& f) {
  app.add_option("--cluster-secret-file", f.cluster_secret_file,
                 "File holding the secret agents must present (none: agents are not authenticated)")
      ->check(CLI::ExistingFile);
  app.add_option("--reset-agent", f.reset_agents,
                 "Forget this agent id's per-agent credential at start (repeatable): its next registration gets "
                 "a new one (for an agent that lost its work dir)");
  app.add_option("--token-ttl-hours", f.token_ttl_hours, "Lifetime of a login token")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--tls-cert", f.tls_cert, "PEM certificate chain: serve gRPC over TLS (needs --tls-key)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", f.tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  app.add_option("--initial-admin-password-file", f.initial_admin_password_file,
                 "On first start, set the password of `admin` and `determined` (while still empty) to this file's "
                 "content (whitespace trimmed; must not be empty)")
      ->check(CLI::ExistingFile);
  app.add_flag("--allow-empty-passwords", f.allow_empty_passwords,
               "Start even when --host is not loopback and a built-in user has an empty password");
}

// Message sizes, logging, pools, the resource manager and trial uids.
void AddServingLimitFlags(CLI::App& app, Flags& f) {
  app.add_option("--max-message-mib", f.max_message_mib,
                 "Largest gRPC message and authenticated REST body (unauthenticated REST bodies: 64 KiB); larger "
                 "trial.so files are uploaded in chunks")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1024.0));
  app.add_option("--grpc-memory-mib", f.grpc_memory_mib,
                 "Memory all gRPC connections together may hold for messages in flight (gRPC resource quota)")
      ->capture_default_str()
      ->check(CLI::Range(16.0, 65536.0));
  app.add_option("--backup-write-timeout-s", f.options.backup_write_timeout_s,
                 "Cancel a det-cli master backup whose client has read nothing for this long (frees the one "
                 "backup slot and its temporary file)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")->capture_default_str();
  app.add_option("--resource-pools", f.resource_pools_file,
                 "YAML file declaring the resource pools (resource_pools: [{pool_name, description, max_slots, "
                 "preemption, default_priority}], default_compute_resource_pool, default_aux_resource_pool); "
                 "none: one pool 'default'");
  app.add_option("--resource-manager", f.resource_manager_file,
                 "YAML file with resource_manager: {type: agent} (default) or {type: slurm, partition_pools, ...}: "
                 "run allocations as Slurm jobs, no agents (docs/operations/slurm.md)");
  app.add_option("--trial-uid-range", f.trial_uid_range,
                 "FIRST-LAST (e.g. 200000-299999, FIRST >= 1000): run each det user's trials as a uid of "
                 "their own from this range (uid = gid, recorded per user, the same on every node; agents must "
                 "run as root). Unset: the agents' --trial-user, one uid shared by all users");
}

void AddFlags(CLI::App& app, Flags& f) {
  // Every flag can also come from a TOML file (keys = flag names without
  // "--"), e.g. deploy/config/master.toml; flags on the command line win.
  app.set_config("--config", "", "Read flags from this TOML file (see deploy/config/master.toml)");
  // A key that names no flag (a typo) is an error naming it, not ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  // --help shows every option's default.
  app.option_defaults()->always_capture_default();
  AddStorageFlags(app, f);
  AddMetricFlags(app, f);
  AddCheckpointFlags(app, f);
  AddServerFlags(app, f);
  AddAuthFlags(app, f);
  AddServingLimitFlags(app, f);
}

// --trial-uid-range "FIRST-LAST" with 1000 <= FIRST <= LAST < 2^32 - 1 into
// `options`; false with a message on stderr otherwise.
bool ParseTrialUidRange(const std::string& spec, det::master::MasterOptions* options) {
  if (spec.empty()) return true;
  unsigned long long first = 0, last = 0;
  char dash = 0, extra = 0;
  if (std::sscanf(spec.c_str(), "%llu%c%llu%c", &first, &dash, &last, &extra) != 3 || dash != '-' ||
      spec.find_first_not_of("0123456789-") != std::string::npos || first < 1000 || first > last ||
      last >= 4294967295ULL) {
    std::fprintf(stderr,
                 "det-master: error: --trial-uid-range '%s': expected FIRST-LAST with 1000 <= FIRST <= LAST < "
                 "4294967295, e.g. 200000-299999 (uids no local account uses)\n",
                 spec.c_str());
    return false;
  }
  // Trials never run as the master's own account or group (the data dir,
  // every checkpoint), and every range uid is also a gid.
  for (const unsigned long long own : {static_cast<unsigned long long>(geteuid()),
                                       static_cast<unsigned long long>(getegid())}) {
    if (own >= first && own <= last) {
      std::fprintf(stderr,
                   "det-master: error: --trial-uid-range '%s' contains %llu, det-master's own uid or gid: pick a "
                   "range no account or group uses (e.g. 200000-299999)\n",
                   spec.c_str(), own);
      return false;
    }
  }
  options->trial_uid_first = static_cast<int64_t>(first);
  options->trial_uid_last = static_cast<int64_t>(last);
  return true;
}

// The AuthCore options the flags set; false with a
// message on stderr when the secret file is unreadable.
bool AuthOptionsFrom(const Flags& f, det::master::AuthOptions* out) {
  out->token_ttl_ms = static_cast<int64_t>(f.token_ttl_hours * 3600 * 1000);
  if (!f.cluster_secret_file.empty()) {
    std::string secret;
    if (!ReadTextFile(f.cluster_secret_file, &secret) || Trim(secret).empty()) {
      std::fprintf(stderr, "det-master: error: --cluster-secret-file %s: unreadable or empty\n",
                   f.cluster_secret_file.c_str());
      return false;
    }
    out->cluster_secret = Trim(secret);
  }
  // Environments leak (/proc/PID/environ, child processes): never read it.
  if (std::getenv("DET_CLUSTER_SECRET") != nullptr) {
    std::fprintf(stderr, "det-master: warning: DET_CLUSTER_SECRET is ignored; use --cluster-secret-file\n");
  }
  return true;
}

// Sets the initial passwords (--initial-admin-password-file) and refuses a
// master bound beyond loopback while a built-in user has an empty password
// (unless --allow-empty-passwords); false with a message on stderr.
bool SecureDefaults(const Flags& f, det::master::AuthCore* auth) {
  if (!f.initial_admin_password_file.empty()) {
    std::string password;
    if (!ReadTextFile(f.initial_admin_password_file, &password) || Trim(password).empty()) {
      std::fprintf(stderr, "det-master: error: --initial-admin-password-file %s: unreadable or empty\n",
                   f.initial_admin_password_file.c_str());
      return false;
    }
    if (absl::Status st = auth->SetInitialPasswords(Trim(password)); !st.ok()) {
      std::fprintf(stderr, "det-master: error: --initial-admin-password-file: %s\n", std::string(st.message()).c_str());
      return false;
    }
  }
  if (det::master::IsLoopbackHost(f.host)) return true;
  absl::Status st = auth->RequireBuiltinPasswords();
  if (st.ok()) return true;
  if (f.allow_empty_passwords) {
    spdlog::warn("--allow-empty-passwords: {}", std::string(st.message()));
    return true;
  }
  std::fprintf(stderr, "det-master: error: --host %s: %s\n", f.host.c_str(), std::string(st.message()).c_str());
  return false;
}

// Insecure credentials, or TLS from --tls-cert/--tls-key (null when
// unreadable).
// Null, with *error naming the file, why and the fix, when one is unreadable
// (e.g. a key only root may read while the unit runs as User=det).
std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const Flags& f, std::string* error) {
  if (f.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  for (const auto& [flag, path, out] : {std::tuple("--tls-key", &f.tls_key, &pair.private_key),
                                        std::tuple("--tls-cert", &f.tls_cert, &pair.cert_chain)}) {
    if (ReadTextFile(*path, out)) continue;
    *error = absl::StrCat("cannot read ", flag, " ", *path, ": ", std::strerror(errno), "; det-master runs as ",
                          getuid() == 0 ? "root" : absl::StrCat("uid ", getuid()),
                          ", which must be able to read it (the shipped unit's User=det: chown det ", *path,
                          "; chmod 600 for the key)");
    return nullptr;
  }
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(ssl);
}

void WritePortsFile(const std::string& path, const std::string& host, int grpc_port, int http_port) {
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << "{\"grpc\": " << grpc_port << ", \"http\": " << http_port << ", \"host\": \"" << host
                     << "\"}\n";
  std::filesystem::rename(tmp, path);
}

// The REST port's connection bounds (master/http/rest_listener.h).
void AddRestFlags(CLI::App& app, Flags& f) {
  app.add_option("--metrics-token-file", f.metrics_token_file,
                 "File (owned by det-master's user or root, no access for others: 0600, 0400, or 0440 with group root "
                 "or the daemon's group; links followed) holding the scrape token: GET /metrics also answers "
                 "'Authorization: Bearer "
                 "<token>' (otherwise an admin's token only)");
  app.add_option("--metrics-listen", f.metrics_listen,
                 "ADDR:PORT of a plain-HTTP listener serving GET /metrics only (port 0: any free one); open on "
                 "loopback without --metrics-token-file, else it needs the token (a non-loopback ADDR needs one)");
  app.add_option("--rest-max-connections", f.rest.max_connections,
                 "Most open REST connections (at most the fd limit less 128); at it, a new one closes the oldest "
                 "still sending its request head, or gets 503 when all run requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--rest-max-connections-per-address", f.rest.max_connections_per_address,
                 "Most open REST connections from one client IP address (IPv6: one /64); beyond, a new one gets 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--rest-header-timeout-s", f.rest.header_timeout_s,
                 "A REST request's head must arrive within this long of the connection (or the previous "
                 "response); else the connection is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--rest-keep-alive-timeout-s", f.rest.keep_alive_timeout_s,
                 "An idle keep-alive REST connection is closed after this long")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
}

// --shutdown-drain-ms: everything still serves, the health check answering
// 503, for `ms` or until another signal of `signals` comes.
void Drain(int64_t ms, sigset_t* signals) {
  if (ms <= 0) return;
  spdlog::info("det-master: health answers 503; closing the ports in {} ms (--shutdown-drain-ms; a second "
               "SIGTERM closes them now)", ms);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    timespec ts{static_cast<time_t>(left.count() / 1000000000), static_cast<long>(left.count() % 1000000000)};
    if (sigtimedwait(signals, nullptr, &ts) >= 0) return;  // another SIGTERM/SIGINT
    if (errno != EINTR) return;                             // EAGAIN: the drain is over
  }
}

// --metrics-listen (checked by ValidateFlags): `server` serves GET /metrics
// only there; logs "metrics listening on HOST:PORT". False with a message on
// stderr when it cannot bind.
bool StartMetricsListener(const Flags& f, det::master::MasterMetrics* metrics, const std::string& scrape_token,
                          det::master::RestServer* server) {
  auto listen = det::master::ParseMetricsListen(f.metrics_listen, !scrape_token.empty());
  if (!listen.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(listen.status().message()).c_str());
    return false;
  }
  server->set_metrics(metrics, scrape_token, /*metrics_only=*/true);
  auto bound = server->Start(listen->host, listen->port);
  if (!bound.ok()) {
    std::fprintf(stderr, "det-master: error: --metrics-listen %s: %s\n", f.metrics_listen.c_str(),
                 std::string(bound.status().message()).c_str());
    return false;
  }
  const bool v6 = listen->host.find(':') != std::string::npos;
  spdlog::info("metrics listening on {}{}{}:{}", v6 ? "[" : "", listen->host, v6 ? "]" : "", *bound);
  return true;
}

// Serves the core until SIGTERM or SIGINT (blocked in `signals`); returns
// the exit code.
int Serve(Flags& f, det::master::MasterCore* core, det::master::AuthCore* auth, det::master::MasterMetrics* metrics,
          const std::string& scrape_token, sigset_t* signals) {
  det::master::ApiService api(core, auth);
  det::master::AgentServiceImpl agents(core, auth);
  det::master::TrialServiceImpl trials(core);
  std::string tls_error;
  std::shared_ptr<grpc::ServerCredentials> credentials = GrpcCredentials(f, &tls_error);
  if (!credentials) {
    std::fprintf(stderr, "det-master: error: %s\n", tls_error.c_str());
    return 2;
  }
  // grpc.health.v1.Health on the gRPC port: SERVING until shutdown begins
  // (the REST health check, master/http/health.h, also probes the database).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int bound_grpc = 0;
  builder.AddListeningPort(absl::StrCat(f.host, ":", f.grpc_port), credentials, &bound_grpc);
  const int64_t max_request_bytes = f.options.max_request_bytes();
  // Every call, unauthenticated ones (Login, GetMaster, agent RPCs)
  // included, is bounded by this: large trial.so files come in chunks
  // (UploadArtifact).
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  // gRPC 1.51 assembles a whole message before that check: the memory quota
  // bounds what all its connections together may hold (it resets streams,
  // ENHANCE_YOUR_CALM, beyond), so concurrent oversized calls cannot add up.
  grpc::ResourceQuota quota("det-master");
  quota.Resize(static_cast<size_t>(f.grpc_memory_mib * (1 << 20)));
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(64 << 20);
  // Agents and trials ping every few seconds to see a dead link (keepalive).
  det::AddServerKeepalivePolicy(&builder);
  builder.RegisterService(&api);
  builder.RegisterService(&agents);
  builder.RegisterService(&trials);
  // A request that does not parse (e.g. a string that is not UTF-8):
  // INVALID_ARGUMENT saying so, not gRPC's bare UNIMPLEMENTED.
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(det::master::ParseErrorInterceptorFactory());
  interceptors.push_back(det::master::MetricsInterceptorFactory(metrics));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_grpc == 0) {
    std::fprintf(stderr, "det-master: error: cannot listen for gRPC on %s:%d\n", f.host.c_str(), f.grpc_port);
    return 1;
  }
  // main() checked the address already, with a stand-in port.
  core->set_trial_master_address(*det::master::TrialMasterAddress(f.host, f.advertise, bound_grpc));

  det::master::RestServer rest(core, auth);
  if (!f.tls_cert.empty()) {
    if (absl::Status st = rest.EnableTls(f.tls_cert, f.tls_key); !st.ok()) {
      std::fprintf(stderr, "det-master: error: %s\n", std::string(st.message()).c_str());
      return 2;
    }
  }
  rest.set_max_request_bytes(max_request_bytes);
  if (absl::Status st = f.rest.Validate(); !st.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  rest.set_listener_options(f.rest);
  rest.set_dashboard_dir(f.dashboard_dir);
  rest.set_metrics(metrics, scrape_token);
  auto bound_http = rest.Start(f.host, f.http_port);
  if (!bound_http.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(bound_http.status().message()).c_str());
    return 1;
  }
  const char* scheme = f.tls_cert.empty() ? "http" : "https";
  spdlog::info("det-master serving gRPC on {}:{}, REST on {}://{}:{}/api/v1/ and the dashboard on {}://{}:{}/",
               f.host, bound_grpc, scheme, f.host, *bound_http, scheme, f.host, *bound_http);
  if (!f.ports_file.empty()) WritePortsFile(f.ports_file, f.host, bound_grpc, *bound_http);
  det::master::RestServer metrics_rest(core, auth);  // --metrics-listen: GET /metrics only
  if (!f.metrics_listen.empty() && !StartMetricsListener(f, metrics, scrape_token, &metrics_rest)) return 1;

  int sig = 0;
  sigwait(signals, &sig);
  spdlog::info("det-master: signal {}, shutting down", sig);
  rest.health().SetShuttingDown();
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) health->Shutdown();
  Drain(f.shutdown_drain_ms, signals);
  rest.Stop();
  metrics_rest.Stop();
  trials.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

// `value` of the size flag `flag`, in units of `unit` bytes, into `*out`:
// 1 to 1048576 units, or 0 (no bound) where `zero_unbounded`; anything else
// (NaN, a fraction of a unit that would round to 0, a product beyond int64)
// is refused with a message naming the flag.
bool SizeFlag(const char* flag, double value, int64_t unit, bool zero_unbounded, int64_t* out) {
  constexpr double kMaxUnits = 1 << 20;
  if (zero_unbounded && value == 0) {
    *out = 0;
    return true;
  }
  if (!(value >= 1 && value <= kMaxUnits)) {  // NaN fails here too
    std::fprintf(stderr, "det-master: error: %s %g: expected %s1 to 1048576\n", flag, value,
                 zero_unbounded ? "0 (unbounded) or " : "");
    return false;
  }
  *out = static_cast<int64_t>(std::llround(value * static_cast<double>(unit)));
  return true;
}

// The flags given in seconds, MiB and KiB into f.options' milliseconds and
// bytes; false with a message on stderr when one is out of range.
bool ApplyFlagUnits(Flags& f) {
  det::master::MasterOptions& o = f.options;
  o.stop_timeout_ms = static_cast<int64_t>(f.stop_timeout_s * 1000);
  o.rendezvous_timeout_ms = static_cast<int64_t>(f.rendezvous_timeout_s * 1000);
  constexpr int64_t kMiB = 1 << 20, kKiB = 1 << 10;
  return SizeFlag("--max-message-mib", f.max_message_mib, kMiB, false, &o.max_message_bytes) &&
         SizeFlag("--max-trial-log-mib", f.max_trial_log_mib, kMiB, false, &o.max_trial_log_bytes) &&
         SizeFlag("--max-artifact-mib", f.max_artifact_mib, kMiB, false, &o.max_trial_so_bytes) &&
         SizeFlag("--max-log-line-kib", f.max_log_line_kib, kKiB, false, &o.max_log_line_bytes) &&
         SizeFlag("--max-trial-metric-mib", f.max_trial_metric_mib, kMiB, true, &o.metric_limits.max_trial_bytes) &&
         SizeFlag("--max-trial-checkpoint-mib", f.max_trial_checkpoint_mib, kMiB, true,
                  &o.checkpoint_limits.max_trial_bytes) &&
         SizeFlag("--max-checkpoint-metadata-kib", f.max_checkpoint_metadata_kib, kKiB, true,
                  &o.checkpoint_limits.max_metadata_bytes);
}

// Checks the flags that go together and converts their units; false (exit 2)
// with a message on stderr.
bool ValidateFlags(Flags& f, det::master::AuthOptions* auth_options) {
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    std::fprintf(stderr, "det-master: error: --tls-cert and --tls-key go together\n");
    return false;
  }
  if (auto address = det::master::TrialMasterAddress(f.host, f.advertise, 1); !address.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(address.status().message()).c_str());
    return false;
  }
  return AuthOptionsFrom(f, auth_options) && ApplyFlagUnits(f) && ParseTrialUidRange(f.trial_uid_range, &f.options);
}

// --resource-pools and --resource-manager into f.options; false (exit 2)
// with a message on stderr.
bool LoadResourceFiles(Flags& f) {
  if (!f.resource_pools_file.empty()) {
    auto pools = det::master::LoadResourcePoolsFile(f.resource_pools_file);
    if (!pools.ok()) {
      std::fprintf(stderr, "det-master: error: --resource-pools: %s\n", std::string(pools.status().message()).c_str());
      return false;
    }
    f.options.resource_pools = *std::move(pools);
  }
  if (!f.resource_manager_file.empty()) {
    auto rm = det::master::LoadResourceManagerFile(f.resource_manager_file);
    if (!rm.ok()) {
      std::fprintf(stderr, "det-master: error: --resource-manager: %s\n", std::string(rm.status().message()).c_str());
      return false;
    }
    f.options.resource_manager = *std::move(rm);
    // The nodes run det-trial from beside det-master unless told otherwise.
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (f.options.resource_manager.slurm.det_trial.empty() && !ec) {
      f.options.resource_manager.slurm.det_trial = (self.parent_path() / "det-trial").string();
    }
  }
  return true;
}

// Opens the data dir, the core and the users (the built-in passwords, the
// --reset-agent credentials), then serves; returns the exit code.
int OpenAndServe(Flags& f, const det::master::AuthOptions& auth_options, sigset_t* signals) {
  std::string scrape_token;
  if (!f.metrics_token_file.empty()) {
    auto token = det::master::ReadMetricsTokenFile(f.metrics_token_file, "--metrics-token-file");
    if (!token.ok()) {
      std::fprintf(stderr, "det-master: error: %s\n", std::string(token.status().message()).c_str());
      return 2;
    }
    scrape_token = *std::move(token);
  }
  if (!f.metrics_listen.empty()) {
    if (auto listen = det::master::ParseMetricsListen(f.metrics_listen, !scrape_token.empty()); !listen.ok()) {
      std::fprintf(stderr, "det-master: error: %s\n", std::string(listen.status().message()).c_str());
      return 2;
    }
  }
  // A bad credentials file is a usage error (exit 2); the error names the
  // flag, the file and the fix, never a secret.
  if (auto s3 = det::master::S3Profiles::Load(f.options.s3_credentials_file); !s3.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(s3.status().message()).c_str());
    return 2;
  }
  // The profiles' secrets live in this process from now on: no core dump,
  // and /proc/PID/{mem,environ} and ptrace for root only (as det-trial).
  if (!f.options.s3_credentials_file.empty() && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    spdlog::warn("prctl(PR_SET_DUMPABLE, 0): {}", std::strerror(errno));
  }
  umask(077);  // nothing the master creates is readable by group or others (data_dir.h)
  if (absl::Status dir = det::master::PreparePrivateDataDir(f.options.data_dir, f.allow_insecure_data_dir); !dir.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(dir.message()).c_str());
    return 2;
  }
  const std::string db_path =
      f.options.db_path.empty() ? (std::filesystem::path(f.options.data_dir) / "det.db").string() : f.options.db_path;
  absl::Status lost = det::master::CheckDatabaseNotLost(f.options.data_dir, db_path, f.init_empty_db);
  if (!lost.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(lost.message()).c_str());
    return 2;
  }
  det::master::RemoveStaleBackups(f.options.data_dir);  // database_backup.h: a backup cut short
  auto core = det::master::MasterCore::Create(f.options);
  if (!core.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(core.status().message()).c_str());
    return 1;
  }
  auto master_info = (*core)->GetMaster({});
  if (!master_info.ok() || !det::master::RecordClusterId(f.options.data_dir, master_info->cluster_id()).ok()) {
    spdlog::warn("cannot record the cluster id in {}/{} (a later start cannot tell a lost database)",
                 f.options.data_dir, det::master::kClusterIdFile);
  }
  auto auth = det::master::AuthCore::Create((*core)->store(), auth_options);
  if (!auth.ok()) {
    std::fprintf(stderr, "det-master: error: %s\n", std::string(auth.status().message()).c_str());
    return 1;
  }
  if (!SecureDefaults(f, auth->get())) return 2;
  for (const std::string& id : f.reset_agents) {
    absl::Status reset = (*core)->ResetAgentCredential(id);
    if (!reset.ok()) {
      std::fprintf(stderr, "det-master: error: --reset-agent %s: %s\n", id.c_str(), std::string(reset.message()).c_str());
      return 1;
    }
    spdlog::warn("agent '{}': credential reset; its next registration gets a new one", id);
  }
  if (!(*auth)->cluster_secret_required()) {
    spdlog::warn("no cluster secret (--cluster-secret-file): any process that reaches the "
                 "gRPC port can register as an agent");
  }
  det::master::MasterMetrics metrics(core->get());
  det::master::SetStoreEvents(&metrics);
  int code = Serve(f, core->get(), auth->get(), &metrics, scrape_token, signals);
  det::master::SetStoreEvents(nullptr);
  auth->reset();
  core->reset();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"det-master: the det-cpp master daemon"};
  AddFlags(app, f);
  AddRestFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  det::master::AuthOptions auth_options;
  if (!ValidateFlags(f, &auth_options)) return 2;
  spdlog::set_level(spdlog::level::from_str(f.log_level));
  det::master::InstallMasterLogSink();  // MasterLogs: the last lines in memory
  if (!LoadResourceFiles(f)) return 2;

  // Signals are taken synchronously (Serve).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return OpenAndServe(f, auth_options, &signals);
}
