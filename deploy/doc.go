// Package deploy holds leasehold's deployment files — the systemd unit,
// the Kubernetes manifests and the Grafana dashboard — and the tests that
// validate them: the unit with systemd-analyze verify, the manifests by
// strict decoding into the Kubernetes API types (an unknown or misspelled
// field fails) and by checks of how the objects fit together.
//
// It is a module of its own so that the Kubernetes API types are not
// dependencies of leasehold. Run its tests from this directory:
//
//	cd deploy && go test ./...
package deploy
