#!/usr/bin/env bash
# Runs every fuzz target for SECONDS seconds each (default 10), one after the
# other: bash scripts/fuzz.sh 10. Seed corpora live in each package's
# testdata/fuzz/<Target>/; a failing input is written there by go test.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
targets=(
	"./internal/fsm FuzzApply"
	"./internal/fsm FuzzApplySequence"
	"./internal/fsm FuzzRestore"
	"./internal/server FuzzValidate"
	"./fence FuzzGuardCheck"
	"./fence FuzzParseToken"
)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "fuzz $pkg $name ${secs}s"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "$pkg"
done
