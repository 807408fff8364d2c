#!/usr/bin/env bash
# Installs a built det-cpp on this node: binaries, libdet_sdk.so, the SDK
# headers and CMake helper (to /usr/local, or $PREFIX), the systemd units and
# example configs (to /etc/det, not overwriting existing ones), and a `det`
# system user. Then: systemctl enable --now det-master (and/or det-agent).
#   deploy/build.sh && sudo deploy/install.sh [master|agent|all]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DET_BUILD_DIR:-$root/build}"
prefix="${PREFIX:-/usr/local}"
role="${1:-all}"
cmake --install "$build" --prefix "$prefix"
ldconfig || true
id det >/dev/null 2>&1 || useradd --system --home-dir /var/lib/det --shell /usr/sbin/nologin det
install -d -m 0755 /etc/det
for unit in master agent; do
  if [ "$role" = all ] || [ "$role" = "$unit" ]; then
    [ -f "/etc/det/$unit.toml" ] || install -m 0644 "$root/deploy/config/$unit.toml" "/etc/det/$unit.toml"
    # Secrets the configs name, generated here (never checked in), readable
    # by the det user only. Copy cluster-secret to every agent node.
    secrets=(cluster-secret)
    [ "$unit" = master ] && secrets+=(initial-admin-password)
    for s in "${secrets[@]}"; do
      if [ ! -s "/etc/det/$s" ]; then
        (umask 077; head -c 32 /dev/urandom | base64 > "/etc/det/$s")
        chown det:det "/etc/det/$s" 2>/dev/null || true
      fi
    done
    install -m 0644 "$root/deploy/systemd/det-$unit.service" /etc/systemd/system/
  fi
done
systemctl daemon-reload 2>/dev/null || true
echo "installed to $prefix; edit /etc/det/*.toml, then: systemctl enable --now det-master det-agent"
echo "admin/determined's first password: /etc/det/initial-admin-password (log in, change it, delete the file)"
