// Package api holds leasehold's protobuf API (package leaseholdv1 and its
// connect bindings in leaseholdv1connect) and the table of error codes that
// every edge shares: the Go client's errors, the RPC status, the CLI's exit
// code and its JSON output all use the codes defined here.
package api
