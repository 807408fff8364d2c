#!/usr/bin/env bash
# Installs a built det-cpp on this node. Under /usr/local (or --prefix /
# $PREFIX), by `cmake --install`: bin/det-master, det-agent, det-trial and
# det-cli (which find the SDK in ../lib); the Trial SDK
# lib/libdet_sdk.so.VERSION with its SONAME link libdet_sdk.so.0 and
# libdet_sdk.so; its headers in include/det/ (det/version.h among them); its
# CMake package in lib/cmake/det (find_package(det): det::sdk,
# det_add_trial); its pkg-config file lib/pkgconfig/det-sdk.pc. Then the
# systemd units and example configs (to /etc/det, not overwriting existing
# ones) and a `det` system user.
# Then: systemctl enable --now det-master (and/or det-agent).
#   deploy/build.sh && sudo deploy/install.sh [OPTIONS] [master|agent|all|client]
# Options (docs/operations/multi-node.md):
#   --prefix DIR   where the binaries go (default $PREFIX, else /usr/local)
#   --root DIR     the node's file-system root: binaries to DIR/PREFIX,
#                  configs to DIR/etc/det, units to DIR/etc/systemd/system,
#                  and (unlike DESTDIR) the paths in the installed configs
#                  and units (/etc/det, /var/lib/det*, the checkpoint root,
#                  PREFIX/bin) point under DIR, so the node runs from there
#                  (a staged or test node; not a container image: see
#                  deploy/docker/). The units' StateDirectory= (always
#                  /var/lib/NAME) is commented out. Default: / (none).
#   --no-system    no useradd, no chown to det, no ldconfig, no systemctl
#                  (an unprivileged or staged install; daemons run as you).
# client: the binaries only (det-cli for a user's machine), no config.
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$src/build}"
prefix="${PREFIX:-/usr/local}"
root=""
system=1
role=all
usage() { echo "usage: $0 [--prefix DIR] [--root DIR] [--no-system] [master|agent|all|client]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || usage; prefix="$2"; shift 2 ;;
    --root) [ $# -ge 2 ] || usage; root="$2"; shift 2 ;;
    --no-system) system=0; shift ;;
    master|agent|all|client) role="$1"; shift ;;
    *) echo "install.sh: error: unknown argument '${1:0:64}'" >&2; usage ;;
  esac
done
# Absolute paths without characters sed or TOML would read as syntax.
path_re='^/[A-Za-z0-9._/+-]{0,1023}$'
if ! [[ $prefix =~ $path_re ]]; then
  echo "install.sh: error: --prefix '${prefix:0:64}' must be an absolute path of letters, digits and ._/+-, e.g. /usr/local" >&2
  exit 2
fi
if [ -n "$root" ]; then
  if ! [[ $root =~ $path_re ]] || [ "$root" = / ]; then
    echo "install.sh: error: --root '${root:0:64}' must be an absolute path of letters, digits and ._/+- other than /, e.g. /srv/node1" >&2
    exit 2
  fi
  root="${root%/}"
fi
etc="$root/etc/det"
bindir="$root$prefix/bin"
# The cluster secret is made once, on the master node; every agent node gets
# a copy of that file (CLUSTER_SECRET_FILE=...), never a fresh one, which the
# master would refuse. Checked before anything is installed.
if [ -n "${CLUSTER_SECRET_FILE:-}" ] && [ ! -s "$CLUSTER_SECRET_FILE" ]; then
  echo "install.sh: error: CLUSTER_SECRET_FILE=$CLUSTER_SECRET_FILE is missing or empty" >&2
  exit 2
fi
if [ "$role" = agent ] && [ ! -s "$etc/cluster-secret" ] && [ -z "${CLUSTER_SECRET_FILE:-}" ]; then
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
DESTDIR="$root" cmake --install "$build" --prefix "$prefix"
if [ "$role" = client ]; then
  echo "installed to $root$prefix: bin/det-cli (export DET_MASTER=HOST:8090; DET_MASTER_CERT_FILE=CA for TLS)"
  exit 0
fi
# As the det user (chown), unless --no-system.
own() { [ "$system" = 1 ] && chown det:det "$@" 2>/dev/null || true; }
if [ "$system" = 1 ]; then
  ldconfig || true
  id det >/dev/null 2>&1 || useradd --system --home-dir /var/lib/det --shell /usr/sbin/nologin det
fi
install -d -m 0755 "$etc"
# The master's data dir (det.db: password and token hashes): det-master
# refuses one that group or others may access.
if [ "$role" = all ] || [ "$role" = master ]; then install -d -m 0700 "$root/var/lib/det"; own "$root/var/lib/det"; fi
# A file readable by the det user only.
install_secret() { install -m 0600 "$1" "$2"; own "$2"; }
new_secret() {
  [ -s "$1" ] && return 0
  (umask 077; head -c 32 /dev/urandom | base64 > "$1")
  own "$1"
}
# The checkpoint root of master.toml, laid out for trials of several uids
# (docs/operations/security.md, Containment): det:det 3733, so the master
# reads and deletes every checkpoint and no trial lists or removes
# another's. Created when missing; an existing one (a mount) only checked.
checkpoint_root() {
  local toml="$etc/master.toml" dir
  dir="$(sed -n 's|^checkpoint-root = "\(/[^"]*\)"$|\1|p' "$toml" 2>/dev/null | head -n 1)"
  [ -n "$dir" ] || return 0
  if [ ! -e "$dir" ]; then
    install -d -m 3733 "$dir"
    own "$dir"
  elif [ "$system" = 1 ] && [ "$(stat -c '%a %U:%G' "$dir")" != "3733 det:det" ]; then
    echo "install.sh: warning: checkpoint root $dir is $(stat -c '%a %U:%G' "$dir"), not 3733 det:det:" \
      "run chown det:det $dir && chmod 3733 $dir where it is mounted (docs/operations/security.md)" >&2
  fi
}
# Points the shipped paths of a config or unit at this node's root and
# prefix (nothing to do for / and /usr/local).
relocate() {
  sed -i -e "s|\"/etc/det/|\"$etc/|g; s| /etc/det/| $etc/|g" \
    -e "s|\"/var/lib/det|\"$root/var/lib/det|g; s|\"/mnt/det-checkpoints\"|\"$root/mnt/det-checkpoints\"|g" \
    -e "s|/usr/local/bin/det-|$bindir/det-|g" "$1"
}
for unit in master agent; do
  if [ "$role" = all ] || [ "$role" = "$unit" ]; then
    toml="$etc/$unit.toml"
    if [ ! -f "$toml" ]; then
      install -m 0644 "$src/deploy/config/$unit.toml" "$toml"
      relocate "$toml"
      if [ "$unit" = master ]; then
        # Trials on the agents dial this address; 0.0.0.0 is refused.
        sed -i "s|^# advertise-address = .*|advertise-address = \"$(hostname -f)\"|" "$toml"
      elif [ -n "${MASTER:-}" ]; then
        sed -i "s|^master = .*|master = \"$MASTER\"|" "$toml"
      fi
    fi
    if [ "$unit" = master ]; then
      checkpoint_root
      new_secret "$etc/cluster-secret"
      new_secret "$etc/initial-admin-password"
    elif [ -n "${CLUSTER_SECRET_FILE:-}" ]; then
      install_secret "$CLUSTER_SECRET_FILE" "$etc/cluster-secret"
    fi
    install -d -m 0755 "$root/etc/systemd/system"
    install -m 0644 "$src/deploy/systemd/det-$unit.service" "$root/etc/systemd/system/"
    relocate "$root/etc/systemd/system/det-$unit.service"
    if [ -n "$root" ]; then
      # systemd makes a StateDirectory= under /var/lib only; the data dir is
      # DIR/var/lib/det (made above) or det-agent's work dir (it makes it).
      sed -i 's|^StateDirectory|# not under --root (the data dir is under it): StateDirectory|' \
        "$root/etc/systemd/system/det-$unit.service"
    fi
  fi
done
[ "$system" = 1 ] && { systemctl daemon-reload 2>/dev/null || true; }
echo "installed to $root$prefix: bin/det-{master,agent,trial,cli}, lib/libdet_sdk.so.0 (the Trial SDK), include/det/,"
echo "  lib/cmake/det (find_package(det)), lib/pkgconfig/det-sdk.pc; trial projects: det-cli trial new NAME"
echo "edit $etc/*.toml, then: systemctl enable --now det-master det-agent"
echo "admin/determined's first password: $etc/initial-admin-password (log in, change it, delete the file)"
