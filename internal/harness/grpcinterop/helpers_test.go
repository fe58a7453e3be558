// Package grpcinterop_test answers one question: does a stock grpc-go
// client (calls with the default proto codec, errors with their details,
// grpc.health.v1, server reflection v1 and v1alpha) work against a real
// leasehold server? It is a module of its own so that grpc-go, which only
// these tests use, stays out of leasehold's go.mod.
package grpcinterop_test

import (
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
