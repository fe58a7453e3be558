#!/usr/bin/env bash
# Runs every fuzz target of the main module for SECONDS seconds each (default
# 15), one after the other: bash scripts/fuzz.sh 15. Targets are found by
# their declarations (func FuzzX in a _test.go file), so a new one is never
# left out. Seed corpora live in each package's testdata/fuzz/<Target>/; a
# failing input is written there by go test.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
found=0
while IFS=: read -r file decl; do
	name=${decl#func }
	name=${name%%(*}
	pkg=./$(dirname "$file")
	echo "fuzz $pkg $name ${secs}s"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "${secs}s" "$pkg"
	found=$((found + 1))
done < <(grep -rHo --include='*_test.go' --exclude-dir=bench --exclude-dir=deploy --exclude-dir=clients --exclude-dir=node_modules '^func Fuzz[A-Za-z0-9_]*(' . | sed 's|^\./||' | sort)
if [ "$found" -lt 8 ]; then
	echo "fuzz.sh: found only $found fuzz targets; expected at least 8" >&2
	exit 1
fi
