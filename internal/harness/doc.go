// Package harness groups the packages that exist only for tests; nothing a
// binary or a library ships imports them (TestForbiddenImports). Each
// answers one question:
//
//	servertest  does one real server (a Raft group of one on a real
//	            listener) do what the API says?
//	simtest     do N real servers on raft's in-memory transport keep the
//	            guarantees under partitions, restarts and leader changes?
//	sim         tier 1 (tag leasehold_sim): under thousands of seeded fault
//	            schedules in virtual time, does the real node path keep every
//	            property, and is each deliberately broken build (mutant)
//	            caught?
//	faults      tier 2 (tag leasehold_faults): does the real binary, one
//	            network namespace per node, keep them under kill -9, SIGSTOP,
//	            partitions, full disks, wiped data dirs and cut replies?
//	e2e         do real processes (clusters, TLS, auth, joins, backups) work
//	            as docs/operating says, and does the layout hold (imports,
//	            dependency lists, file sizes, no mutation hooks)?
//	linz        the porcupine models both fault tiers check histories against
//	netfault    a TCP proxy that stalls or cuts links
//	cutreply    HTTP/2 replies cut off after their headers
//	grpcinterop (a module of its own, so that grpc-go stays out of
//	            leasehold's go.mod) does a stock grpc-go client work: calls,
//	            error details, grpc.health.v1, reflection?
//	scenario    scenario files (a step, then the expected state) that are
//	            tests and documentation at once
//
// docs/dev/testing.md says how to run each tier and how to add a mutant.
package harness
