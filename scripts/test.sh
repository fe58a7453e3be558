#!/usr/bin/env bash
# Every test of the project, in one command (the README's second command and
# .ci/run call it): vet, the Go tests with the race detector, the
# internal/web/browsertest, internal/harness/grpcinterop, deploy/ and bench/
# modules (each its own Go module), and the TypeScript and Python clients against a real server. Run
# it after scripts/ci-services.sh has started PostgreSQL and Redis and
# printed their LEASEHOLD_TEST_* variables.
set -euo pipefail
cd "$(dirname "$0")/.."
# step names the next step and the seconds taken so far, so that a CI log
# shows where the run's time goes.
step() { echo "test.sh: [${SECONDS} s] $*"; }
step go vet
go vet ./...
step go test -race
go test -race -count=1 -timeout 15m ./...
step fault suite tier 1, the simulation
# Fault suite, tier 1 (docs/reliability.md): the cluster simulation, 20 seeds under -race with the
# FSM's invariant assertions, 280 more, 20 % skew, and every mutant caught. Seeds run 20 s of
# cluster time: the nodes run raftnode and the lessor glue, about twice the CPU per second of the
# copies they replaced.
# A seed still running after -seed-timeout of real time is reported as
# STUCK (a livelock of the harness: virtual time creeping without end; the
# last one found was a client retrying forever, see docs/reliability.md)
# and ends its run; such a run is run once more, and fails if it gets stuck
# again or finds a violation.
sim() {
	local out status=0
	out=$(mktemp)
	go test -count=1 "$@" -seed-timeout 90s 2>&1 | tee "$out" || status=${PIPESTATUS[0]}
	if [ "$status" -ne 0 ] && grep -q 'STUCK' "$out" && ! grep -q 'VIOLATION' "$out"; then
		echo "test.sh: a simulation seed got stuck (see above); running that command once more"
		status=0
		go test -count=1 "$@" -seed-timeout 90s || status=$?
	fi
	rm -f "$out"
	return "$status"
}
sim -race -tags leasehold_sim,leasehold_invariants -timeout 10m ./internal/harness/sim -run 'TestSim$' -seeds 20 -first 5000 -duration 20s
sim -tags leasehold_sim -timeout 20m ./internal/harness/sim -run 'TestSim$|TestSimSkewBeyondBound|TestMutants' -seeds 280 -first 1000 -duration 20s
step dashboard browser module
# internal/web/browsertest is a module of its own (chromedp stays out of leasehold's go.mod): the
# dashboard driven in a headless Chromium, and its JSON API by role, against real servers.
(cd internal/web/browsertest && go vet ./... && go test -race -count=1 -timeout 10m ./...)
step gRPC interop module
# internal/harness/grpcinterop is a module of its own (grpc-go, which only these tests use, stays out
# of leasehold's go.mod): stock grpc-go clients call, check health and reflect against real servers.
(cd internal/harness/grpcinterop && go vet ./... && go test -race -count=1 -timeout 10m ./...)
step deploy module
# deploy/ is a module of its own (the Kubernetes API types stay out of leasehold's).
(cd deploy && go vet ./... && go test -count=1 ./...)
step container image
# The image scripts/image.sh builds, run with podman (needs CONTAINERS_CONF from ci-services.sh).
img=$(bash scripts/image.sh | tail -n 1)
(cd deploy && LEASEHOLD_IMAGE="$img" go test -count=1 -tags leasehold_image -run TestImage .)
step bench module
# The side-by-side benchmark's smoke run (its own module: etcd stays out of the main one).
(cd bench && go vet ./... && go test -count=1 -timeout 10m ./...)
step TypeScript client
# The TypeScript client against a real server (node's test runner).
bash scripts/ts-test.sh
step Python client
# The Python client against a real server, PostgreSQL and Redis (pytest).
bash clients/python/scripts/test.sh
step failpoints
# The crash failpoints of a leasehold_failpoints build (tier 2 arms them in the real binary).
go test -race -count=1 -tags leasehold_failpoints ./internal/failpoint
step fault suite tier 2, the real binary
# Fault suite, tier 2: the real binary under kills, pauses, partitions, restart storms, clock
# skew, crash failpoints, a full disk, wiped data dirs and replies cut after their headers,
# histories checked with porcupine, about 5 minutes; -race builds the servers with the race
# detector too; needs root
# (a network namespace per node). See docs/reliability.md.
go test -race -count=1 -tags leasehold_faults -timeout 10m ./internal/harness/faults
step fault suite tier 3, fuzzing
# Fault suite, tier 3: every fuzz target for 8 s (docs/reliability.md; longer: bash scripts/fuzz.sh 60).
bash scripts/fuzz.sh 8
step abuse script, short form
# The floods of docs/operating/security.md ("The abuse script") against the real binary, 4 s
# each, judged by a canary client holding a lock; about 90 s, cut at 5 minutes. Every flood
# must meet the rule.
timeout 300 bash scripts/abuse.sh --short
step done
