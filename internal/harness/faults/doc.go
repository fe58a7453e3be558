// Package faults runs leasehold's tier-2 fault schedules: the real
// leasehold binary as a 3-node cluster, each node in a network namespace
// of its own whose links to the others pass through proxies the test can
// cut, client processes holding locks and writing through the fenced KV,
// and a schedule of faults per test (kill and pause of servers and of
// clients, partitions, whole-cluster crash, clock-rate skew). The tests
// build only with -tags leasehold_faults and need root (CLONE_NEWNET);
// see docs/reliability.md.
package faults
