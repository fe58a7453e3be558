#!/usr/bin/env bash
# Runs every fuzz target of the main module for SECONDS seconds each (default
# 15), one after the other: bash scripts/fuzz.sh 15. Targets are found by
# their declarations (func FuzzX in a _test.go file), so a new one is never
# left out. Seed corpora live in each package's testdata/fuzz/<Target>/; a
# failing input is written there by go test. A target that fails only by Go's
# deadline race at the end of its time, with no failing input, runs again (up
# to three times in all).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
found=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# fuzz_once fuzzes target $2 of package $1. It fails (status 1) only for Go's
# own race at the end of -fuzztime (go.dev/issue/75804: a worker still busy
# when the time is up is reported as "context deadline exceeded"): the run
# failed with that message and wrote no failing input. Any other failure
# ends the script with go test's status.
fuzz_once() {
	local dir="$1/testdata/fuzz/$2" before after status=0
	before=$(ls "$dir" 2>/dev/null | sort)
	go test -run '^$' -fuzz "^${2}\$" -fuzztime "${secs}s" "$1" 2>&1 | tee "$out" || status=${PIPESTATUS[0]}
	[ "$status" -eq 0 ] && return 0
	after=$(ls "$dir" 2>/dev/null | sort)
	if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$out"; then
		return 1
	fi
	exit "$status"
}
while IFS=: read -r file decl; do
	name=${decl#func }
	name=${name%%(*}
	pkg=./$(dirname "$file")
	echo "fuzz $pkg $name ${secs}s"
	tries=1
	until fuzz_once "$pkg" "$name"; do
		if [ "$tries" -eq 3 ]; then
			echo "fuzz.sh: $name: the fuzz coordinator's deadline race $tries times in a row; failing" >&2
			exit 1
		fi
		echo "fuzz.sh: $name: the fuzz coordinator's deadline race (go.dev/issue/75804, fixed in Go 1.27), no failing input written; again" >&2
		tries=$((tries + 1))
	done
	found=$((found + 1))
done < <(grep -rHo --include='*_test.go' --exclude-dir=bench --exclude-dir=deploy --exclude-dir=clients --exclude-dir=node_modules '^func Fuzz[A-Za-z0-9_]*(' . | sed 's|^\./||' | sort)
if [ "$found" -lt 8 ]; then
	echo "fuzz.sh: found only $found fuzz targets; expected at least 8" >&2
	exit 1
fi
