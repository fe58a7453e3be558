// Package scripts holds the shell scripts of the test and CI runs (test.sh,
// ci-services.sh, fuzz.sh, cluster.sh, ts-test.sh, soak-paused-leader.sh) and the test of fuzz.sh's
// retry of Go's fuzzing deadline race; it has no Go code of its own.
package scripts
