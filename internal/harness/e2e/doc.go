// Package e2e holds tests that run the real leasehold binary as separate
// processes on 127.0.0.1: a 3-node cluster under client load whose leader
// is killed with SIGKILL. It has no non-test code.
package e2e
