#!/usr/bin/env bash
# Installs the dashboard browser test's npm dependency (playwright-core, exact
# version pinned in package.json / package-lock.json) into
# tests/browser/node_modules with `npm ci`, unless it is already there.
# Downloads no browser: the test drives Debian's /usr/bin/chromium.
# Needs the npm registry once; afterwards the test runs offline.
# Exit status: 0 when installed (or already present), 1 otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

want="$(sed -n 's/.*"playwright-core": *"\([^"]*\)".*/\1/p' package.json | head -n1)"
have=""
if [ -f node_modules/playwright-core/package.json ]; then
  have="$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' node_modules/playwright-core/package.json | head -n1)"
fi
if [ -n "$want" ] && [ "$have" = "$want" ]; then
  echo "browser-test setup: playwright-core $have present"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "browser-test setup: npm not found (deploy/install-deps.sh installs it)" >&2
  exit 1
fi
echo "browser-test setup: npm ci (playwright-core $want)"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
