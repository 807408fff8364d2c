#!/usr/bin/env bash
# Starts or stops a det-cpp cluster on this machine: one det-master and N
# det-agents in the background, with logs and pid files.
#
#   deploy/cluster.sh start [--agents N] [--slots S] [--grpc-port P] [--http-port P]
#   deploy/cluster.sh stop
#   deploy/cluster.sh status
#
# State lives in $DET_CLUSTER_DIR (default ./det-cluster): master data (the
# SQLite database, artifacts, checkpoints), logs/*.log and pids/*.pid. The
# agents authenticate with a random cluster secret generated on the first
# start (master/cluster-secret, mode 0600); `admin` and `determined` get a
# random first password (master/initial-admin-password, mode 0600), and
# det-cli is logged in as `determined` with it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${DET_BIN_DIR:-${DET_BUILD_DIR:-$root/build}/bin}"
dir="${DET_CLUSTER_DIR:-$PWD/det-cluster}"
cmd="${1:-}"
shift || true
agents=1 slots=1 grpc_port=8090 http_port=8080
while [ $# -gt 0 ]; do
  case "$1" in
    --agents) agents="$2"; shift 2 ;;
    --slots) slots="$2"; shift 2 ;;
    --grpc-port) grpc_port="$2"; shift 2 ;;
    --http-port) http_port="$2"; shift 2 ;;
    *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_all() {
  for pidfile in "$dir"/pids/agent-*.pid "$dir"/pids/master.pid; do
    [ -f "$pidfile" ] || continue
    if alive "$pidfile"; then
      pid=$(cat "$pidfile")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
  done
}

case "$cmd" in
  start)
    mkdir -p "$dir/logs" "$dir/pids" "$dir/master"
    chmod 700 "$dir/master"  # det-master refuses a data dir that group or others may access
    if alive "$dir/pids/master.pid"; then echo "cluster.sh: a master is already running (pid $(cat "$dir/pids/master.pid"))" >&2; exit 1; fi
    rm -f "$dir/master/ports.json"
    secret="$dir/master/cluster-secret"
    if [ ! -s "$secret" ]; then
      (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret")
    fi
    password="$dir/master/initial-admin-password"
    if [ ! -s "$password" ]; then
      (umask 077; head -c 32 /dev/urandom | base64 > "$password")
    fi
    nohup "$bin/det-master" --data-dir "$dir/master" --grpc-port "$grpc_port" --http-port "$http_port" \
      --cluster-secret-file "$secret" --initial-admin-password-file "$password" \
      --ports-file "$dir/master/ports.json" > "$dir/logs/master.log" 2>&1 &
    echo $! > "$dir/pids/master.pid"
    for _ in $(seq 1 200); do [ -f "$dir/master/ports.json" ] && break; alive "$dir/pids/master.pid" || break; sleep 0.05; done
    if [ ! -f "$dir/master/ports.json" ]; then echo "cluster.sh: the master did not start; see $dir/logs/master.log" >&2; tail -5 "$dir/logs/master.log" >&2; exit 1; fi
    # Port 0 means "any free port": the master writes what it bound.
    grpc_port=$(tr -d ' \n' < "$dir/master/ports.json" | sed -n 's/.*"grpc":\([0-9]*\).*/\1/p')
    http_port=$(tr -d ' \n' < "$dir/master/ports.json" | sed -n 's/.*"http":\([0-9]*\).*/\1/p')
    master="127.0.0.1:$grpc_port"
    echo "$master" > "$dir/master/address"
    # Until someone changes it, the first password is determined's too.
    "$bin/det-cli" -m "$master" user login determined --password-stdin < "$password" > /dev/null ||
      echo "cluster.sh: warning: det-cli could not log in as determined (password changed?); use det-cli user login" >&2
    for i in $(seq 1 "$agents"); do
      nohup "$bin/det-agent" --master "$master" --id "agent-$i" --slots "$slots" --work-dir "$dir/agent-$i" \
        --cluster-secret-file "$secret" > "$dir/logs/agent-$i.log" 2>&1 &
      echo $! > "$dir/pids/agent-$i.pid"
    done
    # Wait until every agent is registered.
    for _ in $(seq 1 200); do
      n=$(DET_MASTER="$master" "$bin/det-cli" agent list --json 2>/dev/null | grep -o '"connected": *true' | wc -l || true)
      [ "$n" -ge "$agents" ] && break
      sleep 0.05
    done
    echo "det-master: gRPC $master, REST http://127.0.0.1:$http_port/api/v1/ (logs in $dir/logs)"
    echo "users admin and determined: first password in $password"
    echo "export DET_MASTER=$master"
    ;;
  stop)
    stop_all
    echo "cluster stopped"
    ;;
  status)
    for pidfile in "$dir"/pids/*.pid; do
      [ -f "$pidfile" ] || continue
      name=$(basename "$pidfile" .pid)
      if alive "$pidfile"; then echo "$name: running (pid $(cat "$pidfile"))"; else echo "$name: not running"; fi
    done
    ;;
  *)
    echo "usage: deploy/cluster.sh start|stop|status [--agents N] [--slots S]" >&2
    exit 2
    ;;
esac
