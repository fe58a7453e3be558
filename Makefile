# leasehold's one make target: the fault suite's long run (docs/reliability.md, "Soak").
# make soak SEEDS=10000 FIRST=100000 DURATION=30s
SEEDS ?= 10000
FIRST ?= 100000
DURATION ?= 30s

.PHONY: soak
soak:
	go test -count=1 -tags leasehold_sim -timeout 0 ./internal/harness/sim -run 'TestSim$$' -seeds $(SEEDS) -first $(FIRST) -duration $(DURATION) -seed-timeout 5m -v
