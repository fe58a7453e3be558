#!/usr/bin/env bash
# test.sh — the Python client's tests (clients/python) against a real
# server, PostgreSQL and Redis: builds leasehold once and runs pytest.
# Run after scripts/ci-services.sh has printed LEASEHOLD_TEST_POSTGRES and
# LEASEHOLD_TEST_REDIS (and installed the Debian Python packages).
# PYTHON picks the interpreter; the default is Debian's /usr/bin/python3,
# which sees the apt-installed packages (a pyenv python3 on PATH does not).
set -euo pipefail
cd "$(dirname "$0")/../../.."
py=${PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/leasehold" ./cmd/leasehold
cd clients/python
# -rP shows what passing tests print: the done-before-regrant margin.
LEASEHOLD_BIN="$bin/leasehold" "$py" -m pytest -q -rP -p no:cacheprovider tests
