package client_test

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/server"
)

// TestNodeSecretBootstrapsAuth: with auth off, only the node role may mint
// tokens and turn auth on; WithNodeSecret gives a client that role, so a
// cluster without client certificates is bootstrapped through the client.
func TestNodeSecretBootstrapsAuth(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	ts := startServer(t, func(c *server.Config) { c.NodeSecret = secret })
	ctx := testCtx(t)

	anon, err := dial(t, ts.Addr).AuthService()
	if err != nil {
		t.Fatal(err)
	}
	_, err = anon.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ops"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("an anonymous caller minted a token while auth is off: %v", err)
	}
	wrong, err := dial(t, ts.Addr, client.WithNodeSecret(strings.Repeat("x", 32))).AuthService()
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ops"}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("a wrong node secret minted a token: %v", err)
	}

	node, err := dial(t, ts.Addr, client.WithNodeSecret(secret)).AuthService()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := node.CreateToken(ctx, connect.NewRequest(&pb.CreateTokenRequest{Principal: "ops"}))
	if err != nil {
		t.Fatalf("mint a token with the node secret: %v", err)
	}
	if _, err := node.SetPolicy(ctx, connect.NewRequest(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "ops", Principals: []string{"ops"}, Permissions: []string{"admin"}}})); err != nil {
		t.Fatalf("set a policy with the node secret: %v", err)
	}
	if _, err := node.SetEnabled(ctx, connect.NewRequest(&pb.SetEnabledRequest{Enabled: true})); err != nil {
		t.Fatalf("auth enable with the node secret: %v", err)
	}
	ops, err := dial(t, ts.Addr, client.WithBearerToken(tok.Msg.GetToken())).AuthService()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ops.ListTokens(ctx, connect.NewRequest(&pb.ListTokensRequest{})); err != nil {
		t.Fatalf("the minted admin token once auth is on: %v", err)
	}
}

// TestNodeSecretNeverInClear: a client with the node secret refuses a
// cleartext endpoint that is not a loopback address, before it connects.
func TestNodeSecretNeverInClear(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	for _, ep := range []string{"http://192.0.2.1:7420", "192.0.2.1:7420", "127.0.0.1:7420,leasehold.example:7420"} {
		_, err := client.Dial(testCtx(t), ep, client.WithNodeSecret(secret))
		if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "refusing to send the node secret") {
			t.Errorf("Dial(%q) with the node secret: %v; want invalid-argument", ep, err)
		}
	}
	for _, ep := range []string{"127.0.0.1:7420", "http://localhost:7420", "[::1]:7420", "https://192.0.2.1:7420"} {
		c, err := client.Dial(testCtx(t), ep, client.WithNodeSecret(secret))
		if err != nil {
			t.Errorf("Dial(%q) with the node secret: %v", ep, err)
			continue
		}
		_ = c.Close()
	}
}
