package server

import (
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
)

// TestAuthHeaderNames pins the header names package auth names in its
// refusals to the ones this package reads (the limits' name of a
// forwarded request, admission.go) and sends.
func TestAuthHeaderNames(t *testing.T) {
	if principalHeader != auth.PrincipalHeader {
		t.Fatalf("header names differ: server %q, auth %q", principalHeader, auth.PrincipalHeader)
	}
}
