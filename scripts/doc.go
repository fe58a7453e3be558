// Package scripts holds the shell scripts of the test, CI and release runs
// (test.sh, ci-services.sh, fuzz.sh, cluster.sh, ts-test.sh,
// soak-paused-leader.sh, image.sh, release.sh) and the tests of fuzz.sh's
// retry of Go's fuzzing deadline race and of release.sh's binaries; it has no
// Go code of its own.
package scripts
