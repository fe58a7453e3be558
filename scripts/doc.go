// Package scripts holds the shell scripts of the test, CI and release runs
// (test.sh, ci-services.sh, fuzz.sh, cluster.sh, ts-test.sh,
// soak-paused-leader.sh, image.sh, release.sh, abuse.sh; the abuse
// script's driver is the command in scripts/abuse), the tests of fuzz.sh's retry
// of Go's fuzzing deadline race and of release.sh's binaries, and the check
// of the documentation's links; it has no Go code of its own.
package scripts
