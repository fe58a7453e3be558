// Package fsmpb holds the generated protobuf messages of the Raft log
// commands and the snapshot format (proto/leasehold/fsm/v1/fsm.proto).
package fsmpb
