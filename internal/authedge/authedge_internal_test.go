package authedge

import (
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
)

// TestAuthHeaderNames pins the header names package auth names in its
// refusals to the ones this package reads and sends.
func TestAuthHeaderNames(t *testing.T) {
	if nodeSecretHeader != auth.NodeSecretHeader || principalHeader != auth.PrincipalHeader || nodeValue != auth.ForwardedNode {
		t.Fatalf("header names differ: authedge %q %q %q, auth %q %q %q", nodeSecretHeader, principalHeader, nodeValue, auth.NodeSecretHeader, auth.PrincipalHeader, auth.ForwardedNode)
	}
}
