#!/usr/bin/env bash
# Installs a built det-cpp on this node. Under /usr/local (or $PREFIX), by
# `cmake --install`: bin/det-master, det-agent, det-trial and det-cli (which
# find the SDK in ../lib); the Trial SDK lib/libdet_sdk.so.VERSION with its
# SONAME link libdet_sdk.so.0 and libdet_sdk.so; its headers in include/det/
# (det/version.h among them); its CMake package in lib/cmake/det
# (find_package(det): det::sdk, det_add_trial); its pkg-config file
# lib/pkgconfig/det-sdk.pc. Then the systemd units and example configs (to
# /etc/det, not overwriting existing ones) and a `det` system user.
# Then: systemctl enable --now det-master (and/or det-agent).
#   deploy/build.sh && sudo deploy/install.sh [master|agent|all]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build}"
prefix="${PREFIX:-/usr/local}"
role="${1:-all}"
# The cluster secret is made once, on the master node; every agent node gets
# a copy of that file (CLUSTER_SECRET_FILE=...), never a fresh one, which the
# master would refuse. Checked before anything is installed.
if [ -n "${CLUSTER_SECRET_FILE:-}" ] && [ ! -s "$CLUSTER_SECRET_FILE" ]; then
  echo "install.sh: error: CLUSTER_SECRET_FILE=$CLUSTER_SECRET_FILE is missing or empty" >&2
  exit 2
fi
if [ "$role" = agent ] && [ ! -s /etc/det/cluster-secret ] && [ -z "${CLUSTER_SECRET_FILE:-}" ]; then
  echo "install.sh: error: an agent node needs the master's cluster secret: copy /etc/det/cluster-secret" \
    "from the master node into a private directory, e.g. scp det-master:/etc/det/cluster-secret /root/, then run" \
    "CLUSTER_SECRET_FILE=/root/cluster-secret $0 agent" >&2
  exit 2
fi
# The master address written into agent.toml: HOST:PORT, nothing TOML or sed
# would read as syntax.
master_re='^[]A-Za-z0-9.:[-]{1,253}:[0-9]{1,5}$'
if [ -n "${MASTER:-}" ] && ! [[ $MASTER =~ $master_re ]]; then
  echo "install.sh: error: MASTER='${MASTER:0:64}' must be HOST:PORT, e.g. det-master.example.internal:8090" >&2
  exit 2
fi
cmake --install "$build" --prefix "$prefix"
ldconfig || true
id det >/dev/null 2>&1 || useradd --system --home-dir /var/lib/det --shell /usr/sbin/nologin det
install -d -m 0755 /etc/det
# The master's data dir (det.db: password and token hashes): det-master
# refuses one that group or others may access.
if [ "$role" = all ] || [ "$role" = master ]; then install -d -m 0700 -o det -g det /var/lib/det; fi
# A file readable by the det user only.
install_secret() { install -m 0600 "$1" "$2"; chown det:det "$2" 2>/dev/null || true; }
new_secret() {
  [ -s "$1" ] && return 0
  (umask 077; head -c 32 /dev/urandom | base64 > "$1")
  chown det:det "$1" 2>/dev/null || true
}
# The checkpoint root of master.toml, laid out for trials of several uids
# (docs/operations/security.md, Containment): det:det 3733, so the master
# reads and deletes every checkpoint and no trial lists or removes
# another's. Created when missing; an existing one (a mount) only checked.
checkpoint_root() {
  local toml=/etc/det/master.toml dir
  dir="$(sed -n 's|^checkpoint-root = "\(/[^"]*\)"$|\1|p' "$toml" 2>/dev/null | head -n 1)"
  [ -n "$dir" ] || return 0
  if [ ! -e "$dir" ]; then
    install -d -m 3733 -o det -g det "$dir"
  elif [ "$(stat -c '%a %U:%G' "$dir")" != "3733 det:det" ]; then
    echo "install.sh: warning: checkpoint root $dir is $(stat -c '%a %U:%G' "$dir"), not 3733 det:det:" \
      "run chown det:det $dir && chmod 3733 $dir where it is mounted (docs/operations/security.md)" >&2
  fi
}
for unit in master agent; do
  if [ "$role" = all ] || [ "$role" = "$unit" ]; then
    toml="/etc/det/$unit.toml"
    if [ ! -f "$toml" ]; then
      install -m 0644 "$root/deploy/config/$unit.toml" "$toml"
      if [ "$unit" = master ]; then
        # Trials on the agents dial this address; 0.0.0.0 is refused.
        sed -i "s|^# advertise-address = .*|advertise-address = \"$(hostname -f)\"|" "$toml"
      elif [ -n "${MASTER:-}" ]; then
        sed -i "s|^master = .*|master = \"$MASTER\"|" "$toml"
      fi
    fi
    if [ "$unit" = master ]; then
      checkpoint_root
      new_secret /etc/det/cluster-secret
      new_secret /etc/det/initial-admin-password
    elif [ -n "${CLUSTER_SECRET_FILE:-}" ]; then
      install_secret "$CLUSTER_SECRET_FILE" /etc/det/cluster-secret
    fi
    install -m 0644 "$root/deploy/systemd/det-$unit.service" /etc/systemd/system/
  fi
done
systemctl daemon-reload 2>/dev/null || true
echo "installed to $prefix: bin/det-{master,agent,trial,cli}, lib/libdet_sdk.so.0 (the Trial SDK), include/det/,"
echo "  lib/cmake/det (find_package(det)), lib/pkgconfig/det-sdk.pc; trial projects: det-cli trial new NAME"
echo "edit /etc/det/*.toml, then: systemctl enable --now det-master det-agent"
echo "admin/determined's first password: /etc/det/initial-admin-password (log in, change it, delete the file)"
