#!/usr/bin/env bash
# The TypeScript client's tests (clients/ts) against a real server: builds
# leasehold once, installs the locked npm dependencies (npm ci) and runs
# node's test runner. Needs Go and Node >= 20 with npm; nothing global.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/leasehold" ./cmd/leasehold
cd clients/ts
npm ci --no-audit --no-fund
LEASEHOLD_BIN="$bin/leasehold" npm test
