#!/usr/bin/env bash
# Installs the checkpoint-storage tests' S3 server, npm's s3rver (exact
# version pinned in package.json / package-lock.json), into
# tests/s3/node_modules with `npm ci`, unless it is already there.
# Needs the npm registry once; afterwards the tests run offline.
# Exit status: 0 when installed (or already present), 1 otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

want="$(sed -n 's/.*"s3rver": *"\([^"]*\)".*/\1/p' package.json | head -n1)"
have=""
if [ -f node_modules/s3rver/package.json ]; then
  have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' node_modules/s3rver/package.json | head -n1)"
fi
if [ -n "$want" ] && [ "$have" = "$want" ]; then
  echo "s3-test setup: s3rver $have present"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "s3-test setup: npm not found (deploy/install-deps.sh installs it)" >&2
  exit 1
fi
echo "s3-test setup: npm ci (s3rver $want)"
npm ci --no-audit --no-fund --loglevel=error
