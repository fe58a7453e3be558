#!/usr/bin/env bash
# Soak of tier 2's paused-leader schedule (internal/harness/faults TestPausedLeaderQueues,
# docs/reliability.md): ROUNDS rounds (default 30) of "pause the leader with renewals
# and reads queued at it", as ceil(ROUNDS/3) runs of the test's three rounds, each run
# on a fresh cluster, with -race as CI runs tier 2. Needs root (a network namespace per
# node):
#   sudo bash scripts/soak-paused-leader.sh [ROUNDS]
# Every run goes to the end whatever the others did; the output is kept in
# $LEASEHOLD_SOAK_OUT (default a new file under the temp dir), and the last lines count
# the runs that passed and failed. A failing run prints its margins and node logs;
# porcupine's files of a non-linearizable history are saved as the tier does.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-30}
runs=$(((rounds + 2) / 3))
out=${LEASEHOLD_SOAK_OUT:-$(mktemp -t leasehold-soak-paused-XXXXXX.txt)}
echo "soak: $runs runs of TestPausedLeaderQueues (3 rounds each); output in $out"
status=0
go test -race -count="$runs" -tags leasehold_faults -run '^TestPausedLeaderQueues$' \
	-timeout "$((runs * 5 + 10))m" -v ./internal/harness/faults 2>&1 | tee "$out" || status=${PIPESTATUS[0]}
echo "soak: $(grep -c -- '^--- PASS: TestPausedLeaderQueues' "$out" || true) runs passed," \
	"$(grep -c -- '^--- FAIL: TestPausedLeaderQueues' "$out" || true) failed;" \
	"$(grep -c 'still held their name after it was granted' "$out" || true) rounds with two holders"
exit "$status"
