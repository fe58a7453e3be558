// Package leaseholdv1 holds the generated protobuf messages of the leasehold
// API (proto/leasehold/v1/leasehold.proto). Do not edit the generated files;
// run `go tool -modfile=tools/go.mod buf generate`.
package leaseholdv1
